package db_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/db"
	"boxoffice/testkit/dbtest"
)

// The cost tracer attributes each transaction, statement and written row
// to the role of the context that ran it; a statement outside a
// transaction is a transaction of its own, and a rolled-back one counts
// its statements but no transaction.
func TestCostTracerAttributesWorkToRoles(t *testing.T) {
	t.Parallel()
	pool, costs := dbtest.NewTraced(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "CREATE TABLE cost_probe (n int)")
	require.NoError(t, err)
	costs.Reset()

	relay := db.WithRole(ctx, "relay")
	require.NoError(t, db.WithTx(relay, pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO cost_probe SELECT generate_series(1, 3)"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT count(*) FROM cost_probe")
		return err
	}))
	api := db.WithRole(ctx, "api get-order")
	var n int
	require.NoError(t, pool.QueryRow(api, "SELECT count(*) FROM cost_probe").Scan(&n))
	require.Equal(t, 3, n)
	err = db.WithTx(api, pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "DELETE FROM cost_probe")
		if err != nil {
			return err
		}
		return context.Canceled // rolled back
	})
	require.ErrorIs(t, err, context.Canceled)
	_, err = pool.Exec(ctx, "UPDATE cost_probe SET n = n + 1 WHERE n = 1")
	require.NoError(t, err)
	// A writing CTE under a SELECT (the inbox insert's shape) writes, though
	// its command tag says SELECT; a comment that names a write does not.
	inbox := db.WithRole(ctx, "inbox")
	_, err = pool.Exec(inbox, "-- name: Probe :one\n-- insert or update, says the comment\nWITH ins AS (INSERT INTO cost_probe VALUES (7) RETURNING 1) SELECT count(*) FROM ins")
	require.NoError(t, err)
	_, err = pool.Exec(inbox, "-- delete nothing\nSELECT 1")
	require.NoError(t, err)

	// A call of a function that writes (the relay's settle) writes, though
	// its command tag says SELECT.
	_, err = pool.Exec(db.WithRole(ctx, "settle"), "SELECT * FROM outbox_settle('probe', 0, '{}', '{}', '0', '{}', '0')")
	require.NoError(t, err)

	// A batch is one round trip, however many statements it sends.
	batched := db.WithRole(ctx, "batched")
	require.NoError(t, db.WithTx(batched, pool, func(ctx context.Context, tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue("INSERT INTO cost_probe VALUES (8)")
		b.Queue("INSERT INTO cost_probe VALUES (9)")
		return tx.SendBatch(ctx, b).Close()
	}))

	got := map[string]db.Cost{}
	for _, c := range costs.Costs() {
		require.Positive(t, c.StatementTime, c.Role)
		c.StatementTime = 0 // the time is the clock's; the counts are exact
		got[c.Role] = c.Cost
	}
	require.Equal(t, map[string]db.Cost{
		// BEGIN travels with the first statement: BEGIN+INSERT, SELECT, COMMIT.
		"relay": {Transactions: 1, WriteTransactions: 1, Statements: 2, RowsWritten: 3, RoundTrips: 3},
		// SELECT alone; BEGIN+DELETE, ROLLBACK.
		"api get-order": {Transactions: 1, WriteTransactions: 0, Statements: 2, RowsWritten: 3, RoundTrips: 3},
		"other":         {Transactions: 1, WriteTransactions: 1, Statements: 1, RowsWritten: 1, RoundTrips: 1},
		"inbox":         {Transactions: 2, WriteTransactions: 1, Statements: 2, RowsWritten: 0, RoundTrips: 2},
		"batched":       {Transactions: 1, WriteTransactions: 1, Statements: 2, RowsWritten: 2, RoundTrips: 3},
		"settle":        {Transactions: 1, WriteTransactions: 1, Statements: 1, RowsWritten: 0, RoundTrips: 1},
	}, got)
}
