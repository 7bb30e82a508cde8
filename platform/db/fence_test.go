package db_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/migrations"
	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
	"boxoffice/testkit/dbtest"
)

// TestFence checks fencing where every write path ends: each table of the
// schema refuses any write statement from a session on an old epoch.
func TestFence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	open := epochPools(t)
	old, operator := open(1), open(0)
	_, err := old.Exec(ctx, "INSERT INTO organizers (id) VALUES (gen_random_uuid())")
	require.NoError(t, err, "epoch 1 is current: writes go through")

	epoch, err := sqlcgen.New().RegionEpochRaise(ctx, operator, 2)
	require.NoError(t, err)
	require.EqualValues(t, 2, epoch)
	epoch, err = sqlcgen.New().RegionEpochRaise(ctx, operator, 1)
	require.NoError(t, err)
	require.EqualValues(t, 2, epoch, "the epoch is never lowered")

	current := open(2)
	// Every fenced table (migrations.Unfenced says which are not, and why).
	rows, err := operator.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') AND c.relname <> ALL ($1::text[])
		ORDER BY 1`, migrations.Unfenced)
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		tables = append(tables, name)
	}
	require.NoError(t, rows.Err())
	require.Contains(t, tables, "holds")
	require.Contains(t, tables, "outbox")
	for _, table := range tables {
		for _, stmt := range []string{
			"DELETE FROM " + table + " WHERE false",
			"UPDATE " + table + " SET " + firstColumn(t, operator, table) + " = " + firstColumn(t, operator, table) + " WHERE false",
		} {
			_, err := old.Exec(ctx, stmt)
			require.True(t, db.IsFenced(err), "%s from epoch 1: %v", stmt, err)
			_, err = current.Exec(ctx, stmt)
			require.NoError(t, err, "%s from epoch 2", stmt)
		}
	}
	_, err = old.Exec(ctx, "INSERT INTO organizers (id) VALUES (gen_random_uuid())")
	require.True(t, db.IsFenced(err))
	// hold_reserve and every other function write through the same tables.
	require.EqualValues(t, 1, dbtest.Count(t, operator, "SELECT count(*) FROM organizers"), "the fenced insert wrote nothing")
}

// epochPools returns a constructor of pools, on a new database, whose
// sessions declare epoch (0: none, an operator's).
func epochPools(t *testing.T) func(epoch int64) *pgxpool.Pool {
	t.Helper()
	url := dbtest.NewURL(t)
	return func(epoch int64) *pgxpool.Pool {
		pool, err := db.NewPool(context.Background(), db.PoolConfig{URL: url, MaxConns: 2, RegionEpoch: epoch})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}
}

func firstColumn(t *testing.T, pool *pgxpool.Pool, table string) string {
	t.Helper()
	var col string
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 AND is_identity = 'NO' AND is_generated = 'NEVER' ORDER BY ordinal_position LIMIT 1",
		table).Scan(&col))
	return col
}

// The fence reads the epoch once per client statement (migration 00043),
// however many tables the statement writes, and again for every statement
// a client sends: a session whose transaction wrote before the raise is
// refused at its next statement, in the same transaction, and a statement
// writing several tables after the raise writes none of them.
func TestFenceChecksEveryClientStatementOfATransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	open := epochPools(t)
	old, operator := open(1), open(0)
	const twoWrites = `WITH o AS (INSERT INTO organizers (id) VALUES (gen_random_uuid()) RETURNING id)
		INSERT INTO organizers (id) SELECT gen_random_uuid() FROM o`

	tx, err := old.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, twoWrites)
	require.NoError(t, err, "epoch 1 is current")
	_, err = tx.Exec(ctx, twoWrites)
	require.NoError(t, err, "a second statement of the transaction, still current")

	_, err = sqlcgen.New().RegionEpochRaise(ctx, operator, 2)
	require.NoError(t, err)

	_, err = tx.Exec(ctx, "INSERT INTO organizers (id) VALUES (gen_random_uuid())")
	require.True(t, db.IsFenced(err), "the transaction's next statement after the raise: %v", err)
	require.NoError(t, tx.Rollback(ctx))

	_, err = old.Exec(ctx, twoWrites)
	require.True(t, db.IsFenced(err), "a new transaction after the raise: %v", err)
	require.EqualValues(t, 0, dbtest.Count(t, operator, "SELECT count(*) FROM organizers"), "nothing the refused statements wrote survives")
}
