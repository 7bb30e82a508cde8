package db_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/db"
	"boxoffice/testkit"
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
	// PostgreSQL aborts one of the two, or (when both deadlock checks run
	// before the first abort lands, as on a loaded machine) both: at
	// least one attempt more than the two transactions, and each applied
	// once.
	require.GreaterOrEqual(t, attempts.Load(), int32(3), "a deadlocked transaction was aborted and run again")
	require.LessOrEqual(t, attempts.Load(), int32(4))
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

// A pool's statement and lock timeouts are its sessions': a statement
// that runs too long, or waits too long for a lock another session holds,
// fails instead of holding its connection.
func TestPoolTimeouts(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	ctx := context.Background()
	pool, err := db.NewPool(ctx, db.PoolConfig{URL: url, MaxConns: 2, StatementTimeout: 1500 * time.Millisecond, LockTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	defer pool.Close()
	var st, lt string
	require.NoError(t, pool.QueryRow(ctx, "SELECT current_setting('statement_timeout'), current_setting('lock_timeout')").Scan(&st, &lt))
	require.Equal(t, "1500ms", st)
	require.Equal(t, "300ms", lt)

	_, err = pool.Exec(ctx, "SELECT pg_sleep(3)")
	require.Equal(t, "57014", db.SQLState(err), "statement_timeout cancels it: %v", err)

	dbtest.Exec(t, pool, "CREATE TABLE t (id int PRIMARY KEY)")
	dbtest.Exec(t, pool, "INSERT INTO t VALUES (1)")
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	_, err = tx.Exec(ctx, "SELECT * FROM t WHERE id = 1 FOR UPDATE")
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "SELECT * FROM t WHERE id = 1 FOR UPDATE")
	require.Equal(t, "55P03", db.SQLState(err), "lock_timeout gives up the wait: %v", err)
}

// A pool that, filled, would take the server past max_connections is
// reported at start; one that fits is not (checked only while the shared
// test server has room for it).
func TestCheckConnectionBudget(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	ctx := context.Background()
	check := func(size int32) bool {
		pool, err := db.NewPool(ctx, db.PoolConfig{URL: url, MaxConns: size})
		require.NoError(t, err)
		defer pool.Close()
		logs := testkit.NewLog(t)
		db.CheckConnectionBudget(ctx, pool, logs.Logger)
		return strings.Contains(logs.String(), "can exceed the server's connection limit")
	}
	require.True(t, check(100000), "a pool larger than the server is reported")

	pool, err := db.NewPool(ctx, db.PoolConfig{URL: url, MaxConns: 1})
	require.NoError(t, err)
	var room int
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
		- (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')::int`).Scan(&room))
	pool.Close()
	if room < 10 {
		t.Skipf("the shared server has %d connections to spare: too busy to check that a small pool is not reported", room)
	}
	require.False(t, check(2), "a pool that fits is not reported")
}

// TestUUIDPointersAreEncodedNatively: a *uuid.UUID parameter (sqlc's
// nullable uuid) is sent as the uuid's bytes, or NULL, not formatted as
// text by uuid.UUID.Value and parsed back.
func TestUUIDPointersAreEncodedNatively(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	conn, err := pool.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	id := uuid.New()
	plan := conn.Conn().TypeMap().PlanEncode(pgtype.UUIDOID, pgtype.BinaryFormatCode, &id)
	require.NotContains(t, fmt.Sprintf("%T", plan), "DriverValuer", "a *uuid.UUID goes through its text form")
	var got uuid.UUID
	var isNull bool
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT $1::uuid", &id).Scan(&got))
	require.Equal(t, id, got)
	var none *uuid.UUID
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT $1::uuid IS NULL", none).Scan(&isNull))
	require.True(t, isNull)
}
