package pgcluster_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/pgcluster"
)

// clusterDir returns an empty directory for a cluster. t.TempDir's parent is
// private (mode 0700) to the user running the test; as root, the cluster
// runs as another user, who must be able to enter it.
func clusterDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	}
	return filepath.Join(dir, "pg")
}

func startCluster(t *testing.T, cfg pgcluster.Config) *pgcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, c.Stop(context.Background()))
	})
	return c
}

func TestStartServesQueries(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pgcluster.Config{Dir: clusterDir(t), Fast: true})

	conn, err := pgx.Connect(t.Context(), c.URL())
	require.NoError(t, err)
	var one int
	require.NoError(t, conn.QueryRow(t.Context(), "select 1").Scan(&one))
	require.Equal(t, 1, one)
	require.NoError(t, conn.Close(t.Context()))

	require.NoError(t, c.Stop(t.Context()))
	require.NoError(t, c.Stop(t.Context()), "a second Stop is harmless")
	_, err = pgx.Connect(t.Context(), c.URL())
	require.Error(t, err, "the server is down after Stop")
}

func TestStartReusesExistingCluster(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)

	first := startCluster(t, pgcluster.Config{Dir: dir})
	conn, err := pgx.Connect(t.Context(), first.URL())
	require.NoError(t, err)
	_, err = conn.Exec(t.Context(), "create table kept (id int); insert into kept values (42)")
	require.NoError(t, err)
	require.NoError(t, conn.Close(t.Context()))
	require.NoError(t, first.Stop(t.Context()))

	second := startCluster(t, pgcluster.Config{Dir: dir})
	conn, err = pgx.Connect(t.Context(), second.URL())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var id int
	require.NoError(t, conn.QueryRow(t.Context(), "select id from kept").Scan(&id))
	require.Equal(t, 42, id)
}

func TestStartStopsServerLeftRunning(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)

	// A run that never calls Stop, like a killed `boxoffice dev`.
	abandoned, err := pgcluster.Start(t.Context(), pgcluster.Config{Dir: dir, Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = abandoned.Stop(context.Background()) })

	c := startCluster(t, pgcluster.Config{Dir: dir, Fast: true})
	conn, err := pgx.Connect(t.Context(), c.URL())
	require.NoError(t, err)
	require.NoError(t, conn.Close(t.Context()))
}

func TestStartRemovesStalePidFile(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	c := startCluster(t, pgcluster.Config{Dir: dir, Fast: true})
	require.NoError(t, c.Stop(t.Context()))

	// A postmaster.pid whose process is gone, as after a machine crash.
	pidFile := filepath.Join(dir, "data", "postmaster.pid")
	require.NoError(t, os.WriteFile(pidFile, []byte("999999999\n"+filepath.Join(dir, "data")+"\n"), 0o600))

	c = startCluster(t, pgcluster.Config{Dir: dir, Fast: true})
	conn, err := pgx.Connect(t.Context(), c.URL())
	require.NoError(t, err)
	require.NoError(t, conn.Close(t.Context()))
}

func TestStartReportsPortInUse(t *testing.T) {
	t.Parallel()
	c := startCluster(t, pgcluster.Config{Dir: clusterDir(t), Fast: true})

	_, err := pgcluster.Start(t.Context(), pgcluster.Config{Dir: clusterDir(t), Port: c.Port(), Fast: true})
	require.ErrorContains(t, err, "is already in use")
}

func TestTemporaryClusterDeletesDir(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	c := startCluster(t, pgcluster.Config{Dir: dir, Fast: true, Temporary: true})
	require.NoError(t, c.Stop(t.Context()))
	require.NoDirExists(t, dir)
}

func TestStartAsRootRejectsUnreachableDir(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("only root runs the server as another user")
	}
	// t.TempDir's parent is private to root.
	dir := filepath.Join(t.TempDir(), "pg")
	_, err := pgcluster.Start(t.Context(), pgcluster.Config{Dir: dir, Fast: true})
	require.ErrorContains(t, err, "is not searchable")
}

func TestStandbyReplicatesAndPromotes(t *testing.T) {
	t.Parallel()
	primary := startCluster(t, pgcluster.Config{Dir: clusterDir(t), Fast: true})
	ctx := t.Context()
	pc, err := pgx.Connect(ctx, primary.URL())
	require.NoError(t, err)
	defer pc.Close(context.Background())
	_, err = pc.Exec(ctx, "create table seat (id int primary key); insert into seat values (1)")
	require.NoError(t, err)

	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	standby, err := pgcluster.StartStandby(sctx, primary, pgcluster.Config{Dir: clusterDir(t), Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, standby.Stop(context.Background())) })
	require.True(t, standby.InRecovery())

	// A row committed after the base backup reaches the standby by
	// streaming; the standby refuses writes until promoted.
	_, err = pc.Exec(ctx, "insert into seat values (2)")
	require.NoError(t, err)
	sc, err := pgx.Connect(ctx, standby.URL())
	require.NoError(t, err)
	defer sc.Close(context.Background())
	var lsn string
	require.NoError(t, pc.QueryRow(ctx, "select pg_current_wal_insert_lsn()::text").Scan(&lsn))
	waitFor(t, func() bool {
		var caught bool
		require.NoError(t, sc.QueryRow(ctx, "select pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&caught))
		return caught
	})
	var n int
	require.NoError(t, sc.QueryRow(ctx, "select count(*) from seat").Scan(&n))
	require.Equal(t, 2, n)
	_, err = sc.Exec(ctx, "insert into seat values (3)")
	require.ErrorContains(t, err, "read-only transaction")

	// The primary dies; the standby is promoted (twice: a no-op) and writes.
	require.NoError(t, primary.Kill(ctx))
	require.NoError(t, primary.Kill(ctx), "killing a dead cluster is a no-op")
	require.NoError(t, standby.Promote(sctx))
	require.NoError(t, standby.Promote(sctx), "promoting a primary is a no-op")
	require.False(t, standby.InRecovery())
	var inRecovery bool
	require.NoError(t, sc.QueryRow(ctx, "select pg_is_in_recovery()").Scan(&inRecovery))
	require.False(t, inRecovery)
	_, err = sc.Exec(ctx, "insert into seat values (3)")
	require.NoError(t, err)
}

// waitFor polls cond, a check of an observed state, until it holds or 30s
// pass.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "condition not met within 30s")
		time.Sleep(20 * time.Millisecond)
	}
}
