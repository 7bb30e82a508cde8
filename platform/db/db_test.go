package db_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/db"
	"boxoffice/testkit/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// Two transactions that lock the same rows in opposite orders deadlock;
// PostgreSQL aborts one, and WithTx runs it again so that both callers
// succeed and neither sees the deadlock.
func TestWithTxRetriesDeadlocks(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	dbtest.Exec(t, pool, "CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL)")
	dbtest.Exec(t, pool, "INSERT INTO accounts VALUES (1, 0), (2, 0)")

	var attempts atomic.Int32
	bothLockedFirst := sync.WaitGroup{}
	bothLockedFirst.Add(2)
	transfer := func(first, second int) error {
		var once sync.Once
		return db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
			attempts.Add(1)
			if _, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", first); err != nil {
				return err
			}
			once.Do(bothLockedFirst.Done) // first attempt: wait until the other holds its first lock
			bothLockedFirst.Wait()
			_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance + 1 WHERE id = $1", second)
			return err
		})
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = transfer(1, 2) })
	wg.Go(func() { errs[1] = transfer(2, 1) })
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.EqualValues(t, 3, attempts.Load(), "exactly one transaction was aborted and run again")
	require.EqualValues(t, 4, dbtest.Count(t, pool, "SELECT sum(balance) FROM accounts"))
}

func TestWithTxRollsBackOnError(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	dbtest.Exec(t, pool, "CREATE TABLE notes (body text)")
	err := db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO notes VALUES ('x')")
		require.NoError(t, err)
		return db.ErrConflict
	})
	require.ErrorIs(t, err, db.ErrConflict)
	require.EqualValues(t, 0, dbtest.Count(t, pool, "SELECT count(*) FROM notes"))
}
