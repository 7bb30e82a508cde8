package db_test

import (
	"context"
	"testing"
	"time"

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

// boxoffice_db_deadlocks_total is the database's own deadlock count
// (pg_stat_database), and the pool's size is exported beside its
// connections in use.
func TestCollectorExportsDeadlocksAndPoolSize(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(db.NewCollector(pool))
	var deadlocks int64
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT coalesce(deadlocks, 0) FROM pg_stat_database WHERE datname = current_database()").Scan(&deadlocks))
	require.Equal(t, float64(deadlocks), gathered(t, reg, "boxoffice_db_deadlocks_total"))
	require.Equal(t, float64(pool.Stat().MaxConns()), gathered(t, reg, "boxoffice_db_pool_max_connections"))
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
