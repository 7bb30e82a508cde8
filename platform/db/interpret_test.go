package db_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/testkit/dbtest"
)

// requireNotFound checks the guarantees of an interpreted missing row: it
// is the sentinel, it is still the database's error, and it reads as it.
func requireNotFound(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, db.ErrNotFound)
	require.ErrorIs(t, err, pgx.ErrNoRows, "the original stays in the chain")
	require.Equal(t, fault.CodeNotFound, fault.CodeOf(err))
	require.Equal(t, pgx.ErrNoRows.Error(), err.Error(), "the message is the database's")
}

func requireConflict(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, db.ErrConflict)
	require.Equal(t, fault.CodeConflict, fault.CodeOf(err))
	require.Equal(t, "notes_pkey", db.ConstraintName(err), "the constraint stays inspectable")
	require.Equal(t, "23505", db.SQLState(err))
}

// The interpreting DBTX and the transaction WithTx hands out report a
// missing row and a unique violation as the sentinels at the statement
// that read, on every path a sqlcgen query takes (QueryRow's Scan, Exec,
// Query's rows); other results are the database's.
func TestInterpretingReadsAndWrites(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	dbtest.Exec(t, pool, "CREATE TABLE notes (id int PRIMARY KEY)")
	dbtest.Exec(t, pool, "INSERT INTO notes VALUES (1)")

	check := func(t *testing.T, d db.DBTX) {
		var id int
		requireNotFound(t, d.QueryRow(ctx, "SELECT id FROM notes WHERE id = 2").Scan(&id))
		require.NoError(t, d.QueryRow(ctx, "SELECT id FROM notes WHERE id = 1").Scan(&id))
		require.Equal(t, 1, id)

		_, err := d.Exec(ctx, "INSERT INTO notes VALUES (1)")
		requireConflict(t, err)
		_, err = d.Exec(ctx, "SELECT nosuchcolumn FROM notes")
		require.Error(t, err)
		require.NotErrorIs(t, err, db.ErrNotFound)
		require.NotErrorIs(t, err, db.ErrConflict)
		require.Equal(t, fault.CodeUnknown, fault.CodeOf(err), "other errors carry no code")

		rows, err := d.Query(ctx, "INSERT INTO notes VALUES (1) RETURNING id")
		require.NoError(t, err)
		for rows.Next() {
		}
		requireConflict(t, rows.Err())
	}
	t.Run("pool", func(t *testing.T) { check(t, db.Interpreting(pool)) })
	t.Run("WithTx", func(t *testing.T) {
		err := db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
			// Savepoints, so that the transaction survives each failure.
			for _, probe := range []func(d db.DBTX) error{
				func(d db.DBTX) error {
					var id int
					return d.QueryRow(ctx, "SELECT id FROM notes WHERE id = 2").Scan(&id)
				},
				func(d db.DBTX) error { _, err := d.Exec(ctx, "INSERT INTO notes VALUES (1)"); return err },
			} {
				sp, err := tx.Begin(ctx)
				require.NoError(t, err)
				perr := probe(sp)
				require.NoError(t, sp.Rollback(ctx))
				if errors.Is(perr, pgx.ErrNoRows) {
					requireNotFound(t, perr)
				} else {
					requireConflict(t, perr)
				}
			}
			return nil
		})
		require.NoError(t, err)
	})
	t.Run("InterpretingTx", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		itx := db.InterpretingTx(tx)
		require.Equal(t, itx, db.InterpretingTx(itx), "interpreting twice is once")
		var id int
		requireNotFound(t, itx.QueryRow(ctx, "SELECT id FROM notes WHERE id = 2").Scan(&id))
		_, err = itx.Exec(ctx, "INSERT INTO notes VALUES (1)") // aborts tx: last
		requireConflict(t, err)
	})
}

// Interpret is idempotent: an interpreted error is returned as is, so a
// caller that still applies it to an interpreting DBTX's error changes
// nothing.
func TestInterpretTwiceIsOnce(t *testing.T) {
	once := db.Interpret(pgx.ErrNoRows)
	requireNotFound(t, once)
	require.Same(t, once, db.Interpret(once))
	require.NoError(t, db.Interpret(nil))
	plain := errors.New("boom")
	require.Same(t, plain, db.Interpret(plain))
}
