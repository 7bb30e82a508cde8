package db_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/db"
	"boxoffice/testkit/dbtest"
)

func TestCollectorCountsLockWaits(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	reg.MustRegister(db.NewCollector(pool))
	dbtest.Exec(t, pool, "CREATE TABLE lockme (id int PRIMARY KEY)")
	dbtest.Exec(t, pool, "INSERT INTO lockme VALUES (1)")

	require.Equal(t, 0.0, lockWaiting(t, reg))

	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx)
	_, err = holder.Exec(ctx, "SELECT * FROM lockme WHERE id = 1 FOR UPDATE")
	require.NoError(t, err)
	waiterDone := make(chan error, 1)
	go func() {
		_, err := pool.Exec(ctx, "UPDATE lockme SET id = 1 WHERE id = 1")
		waiterDone <- err
	}()
	require.Eventually(t, func() bool {
		return lockWaiting(t, reg) == 1
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, holder.Rollback(ctx))
	require.NoError(t, <-waiterDone)
}

// lockWaiting gathers the lock gauge's current value.
func lockWaiting(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "boxoffice_db_lock_waiting_sessions" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("boxoffice_db_lock_waiting_sessions not exported")
	return 0
}

// A deadlock PostgreSQL breaks shows on boxoffice_db_deadlocks_total, and
// the pool's size is exported beside its connections in use.
func TestCollectorCountsDeadlocks(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	reg.MustRegister(db.NewCollector(pool))
	dbtest.Exec(t, pool, "CREATE TABLE pair (id int PRIMARY KEY)")
	dbtest.Exec(t, pool, "INSERT INTO pair VALUES (1), (2)")
	before := gathered(t, reg, "boxoffice_db_deadlocks_total")
	require.Equal(t, float64(pool.Stat().MaxConns()), gathered(t, reg, "boxoffice_db_pool_max_connections"))

	a, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer a.Rollback(ctx) //nolint:errcheck
	b, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer b.Rollback(ctx) //nolint:errcheck
	_, err = a.Exec(ctx, "SELECT * FROM pair WHERE id = 1 FOR UPDATE")
	require.NoError(t, err)
	_, err = b.Exec(ctx, "SELECT * FROM pair WHERE id = 2 FOR UPDATE")
	require.NoError(t, err)
	aErr, bErr := make(chan error, 1), make(chan error, 1)
	go func() { _, err := a.Exec(ctx, "SELECT * FROM pair WHERE id = 2 FOR UPDATE"); aErr <- err }()
	go func() { _, err := b.Exec(ctx, "SELECT * FROM pair WHERE id = 1 FOR UPDATE"); bErr <- err }()
	// PostgreSQL aborts one; rolling it back lets the other through.
	var aborted pgx.Tx
	var other chan error
	select {
	case err := <-aErr:
		require.Equal(t, "40P01", db.SQLState(err), "%v", err)
		aborted, other = a, bErr
	case err := <-bErr:
		require.Equal(t, "40P01", db.SQLState(err), "%v", err)
		aborted, other = b, aErr
	}
	require.NoError(t, aborted.Rollback(ctx))
	require.NoError(t, <-other)
	require.Eventually(t, func() bool { return gathered(t, reg, "boxoffice_db_deadlocks_total") > before },
		10*time.Second, 100*time.Millisecond, "the statistics record the deadlock once flushed")
}

// gathered is the value of the registry's one sample of name.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("%s not exported", name)
	return 0
}
