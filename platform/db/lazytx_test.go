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
	costs := db.NewCostTracer()
	pool, err := db.NewPool(context.Background(), db.PoolConfig{URL: dbtest.NewURL(t), Tracer: costs})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ctx := context.Background()
	_, err = pool.Exec(ctx, "CREATE TABLE lazy_probe (n int PRIMARY KEY)")
	require.NoError(t, err)

	trips := func(role string, fn func(ctx context.Context, tx pgx.Tx) error) int64 {
		t.Helper()
		costs.Reset()
		require.NoError(t, db.WithTx(db.WithRole(ctx, role), pool, fn))
		for _, c := range costs.Costs() {
			if c.Role == role {
				return c.RoundTrips
			}
		}
		return 0
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
