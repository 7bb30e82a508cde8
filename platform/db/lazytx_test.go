package db_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/db"
	"boxoffice/testkit/dbtest"
)

// A WithTx transaction sends its BEGIN with its first statement: one
// round trip fewer than pgx's Begin, whatever that statement is (Exec,
// Query, QueryRow); one with no statement sends nothing.
func TestWithTxSendsBeginWithTheFirstStatement(t *testing.T) {
	t.Parallel()
	pool, costs := dbtest.NewTraced(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "CREATE TABLE lazy_probe (n int PRIMARY KEY)")
	require.NoError(t, err)

	trips := func(role string, fn func(ctx context.Context, tx pgx.Tx) error) int64 {
		t.Helper()
		n, err := roundTrips(ctx, costs, pool, role, fn)
		require.NoError(t, err)
		return n
	}
	require.Equal(t, int64(2), trips("exec", func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO lazy_probe VALUES (1)")
		return err
	}), "BEGIN+INSERT, COMMIT")
	require.Equal(t, int64(3), trips("query", func(ctx context.Context, tx pgx.Tx) error {
		rows, err := tx.Query(ctx, "SELECT n FROM lazy_probe")
		if err != nil {
			return err
		}
		ns, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return err
		}
		require.Equal(t, []int{1}, ns)
		_, err = tx.Exec(ctx, "INSERT INTO lazy_probe VALUES (2)")
		return err
	}), "BEGIN+SELECT, INSERT, COMMIT")
	require.Equal(t, int64(2), trips("queryrow", func(ctx context.Context, tx pgx.Tx) error {
		var n int
		require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM lazy_probe").Scan(&n))
		require.Equal(t, 2, n)
		return nil
	}))
	require.Zero(t, trips("empty", func(context.Context, pgx.Tx) error { return nil }), "nothing to send")
}

// It is a transaction like pgx's: what fails rolls back whole, its errors
// are interpreted, savepoints nest, a failed statement makes the commit
// fail, and its connection serves the next transaction clean.
func TestWithTxLazyBeginKeepsTransactionSemantics(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "CREATE TABLE lazy_sem (n int PRIMARY KEY)")
	require.NoError(t, err)
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM lazy_sem").Scan(&n))
		return n
	}
	boom := errors.New("boom")
	err = db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO lazy_sem VALUES (1), (2)"); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Zero(t, count(), "rolled back")

	err = db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		var n int
		return tx.QueryRow(ctx, "SELECT n FROM lazy_sem WHERE n = 42").Scan(&n)
	})
	require.ErrorIs(t, err, db.ErrNotFound, "no row, first statement or not")

	err = db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO lazy_sem VALUES (1)"); err != nil {
			return err
		}
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := sp.Exec(ctx, "INSERT INTO lazy_sem VALUES (1)"); !errors.Is(err, db.ErrConflict) {
			return errors.New("want a conflict in the savepoint")
		}
		return sp.Rollback(ctx)
	})
	require.NoError(t, err)
	require.Equal(t, 1, count(), "the savepoint rolled back alone")

	err = db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO lazy_sem VALUES (1)")
		require.ErrorIs(t, err, db.ErrConflict, "the first statement's error, interpreted")
		return nil // and commit anyway: the server rolls back
	})
	require.ErrorIs(t, err, pgx.ErrTxCommitRollback)

	// Many at once, on a small pool: every connection comes back usable.
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			err := db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "INSERT INTO lazy_sem VALUES ($1) ON CONFLICT DO NOTHING", 100+i%8)
				if i%3 == 0 {
					return boom
				}
				return err
			})
			if i%3 == 0 {
				require.ErrorIs(t, err, boom)
			} else {
				require.NoError(t, err)
			}
		})
	}
	wg.Wait()
	require.Equal(t, 1+8, count())
	require.Zero(t, pool.Stat().AcquiredConns(), "every connection went back to the pool")
}

// Deferred writes cost no round trip of their own: they go with the next
// statement, which sees them, or with the COMMIT (and BEGIN, when they are
// all the transaction does). A failed write fails what it went with and
// nothing commits, the COMMIT it went with included; a savepoint sends
// them first, so that rolling it back keeps them; a rollback drops them.
func TestDeferredWritesGoWithTheNextStatement(t *testing.T) {
	t.Parallel()
	pool, costs := dbtest.NewTraced(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "CREATE TABLE deferred_probe (n int PRIMARY KEY CHECK (n < 100))")
	require.NoError(t, err)
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM deferred_probe").Scan(&n))
		return n
	}
	trips := func(role string, fn func(ctx context.Context, tx pgx.Tx) error) (int64, error) {
		return roundTrips(ctx, costs, pool, role, fn)
	}
	insert := func(ctx context.Context, tx pgx.Tx, n int) {
		t.Helper()
		_, err := db.Deferring(tx).Exec(ctx, "INSERT INTO deferred_probe VALUES ($1)", n)
		require.NoError(t, err)
	}

	n, err := trips("commit", func(ctx context.Context, tx pgx.Tx) error {
		insert(ctx, tx, 1)
		insert(ctx, tx, 2)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "BEGIN, both INSERTs and COMMIT in one request")
	require.Equal(t, 2, count())

	n, err = trips("read", func(ctx context.Context, tx pgx.Tx) error {
		insert(ctx, tx, 3)
		var seen int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM deferred_probe").Scan(&seen); err != nil {
			return err
		}
		require.Equal(t, 3, seen, "the statement sees the writes it carried")
		insert(ctx, tx, 4)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "BEGIN+INSERT+SELECT, INSERT+COMMIT")
	require.Equal(t, 4, count())

	_, err = trips("conflict", func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO deferred_probe VALUES (5)"); err != nil {
			return err
		}
		insert(ctx, tx, 1) // exists
		return nil
	})
	require.ErrorIs(t, err, db.ErrDeferredWrite)
	require.ErrorIs(t, err, db.ErrConflict, "interpreted")
	require.Equal(t, 4, count(), "the COMMIT it went with skipped: the statement before it did not commit either")

	_, err = trips("next", func(ctx context.Context, tx pgx.Tx) error {
		insert(ctx, tx, 100) // breaks the CHECK
		_, err := tx.Exec(ctx, "INSERT INTO deferred_probe VALUES (6)")
		require.ErrorIs(t, err, db.ErrDeferredWrite, "the statement the write went with reports it")
		_, err2 := tx.Exec(ctx, "SELECT 1")
		require.ErrorIs(t, err2, db.ErrDeferredWrite, "and every statement after it")
		return nil // commit anyway
	})
	require.ErrorIs(t, err, db.ErrDeferredWrite, "the commit too")
	require.Equal(t, 4, count())

	_, err = trips("savepoint", func(ctx context.Context, tx pgx.Tx) error {
		insert(ctx, tx, 7)
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := sp.Exec(ctx, "INSERT INTO deferred_probe VALUES (8)"); err != nil {
			return err
		}
		return sp.Rollback(ctx)
	})
	require.NoError(t, err)
	require.Equal(t, 5, count(), "7 kept, 8 rolled back with its savepoint")

	boom := errors.New("boom")
	_, err = trips("rollback", func(ctx context.Context, tx pgx.Tx) error {
		insert(ctx, tx, 9)
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, 5, count(), "dropped unsent")

	// A transaction not begun by WithTx on a pool writes at once.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = db.Deferring(tx).Exec(ctx, "INSERT INTO deferred_probe VALUES (1)")
	require.ErrorIs(t, err, db.ErrConflict)
	require.NoError(t, tx.Rollback(ctx))

	// The connections come back clean: a failed commit batch left none
	// in a transaction.
	for range 4 {
		require.Equal(t, 5, count())
	}
}

// roundTrips runs fn in a WithTx transaction as role and returns the
// round trips costs counted for it, with WithTx's error.
func roundTrips(ctx context.Context, costs *db.CostTracer, pool db.Executor, role string, fn func(ctx context.Context, tx pgx.Tx) error) (int64, error) {
	c, err := roleCost(ctx, costs, pool, role, fn)
	return c.RoundTrips, err
}

// roleCost runs fn in a WithTx transaction as role and returns what costs
// counted for it, with WithTx's error.
func roleCost(ctx context.Context, costs *db.CostTracer, pool db.Executor, role string, fn func(ctx context.Context, tx pgx.Tx) error) (db.RoleCost, error) {
	costs.Reset()
	err := db.WithTx(db.WithRole(ctx, role), pool, fn)
	for _, c := range costs.Costs() {
		if c.Role == role {
			return c, err
		}
	}
	return db.RoleCost{}, err
}
