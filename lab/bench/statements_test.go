package bench_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/lab/bench"
	"boxoffice/platform/pgcluster"
)

// Statements counts each statement of one database exactly, by its sqlc
// name, from the last reset on; other databases' statements are not
// counted.
func TestStatementsCountEachStatementOfOneDatabase(t *testing.T) {
	t.Parallel()
	settings := bench.StatementSettings()
	if settings == nil {
		t.Skip("this machine's PostgreSQL has no pg_stat_statements module")
	}
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		// The cluster runs as another user, who must enter its directory.
		require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := pgcluster.Start(ctx, pgcluster.Config{Dir: filepath.Join(dir, "pg"), Fast: true, Temporary: true, Settings: settings})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Stop(context.Background()) })

	stmts := bench.Statements{AdminURL: c.URL()}
	on, err := stmts.Available(ctx)
	require.NoError(t, err)
	require.True(t, on)

	admin, err := pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	defer admin.Close(context.Background())
	_, err = admin.Exec(ctx, "CREATE DATABASE measured")
	require.NoError(t, err)
	cfg, err := pgx.ParseConfig(c.URL())
	require.NoError(t, err)
	cfg.Database = "measured"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(context.Background())

	_, err = conn.Exec(ctx, "SELECT 1 -- before the reset")
	require.NoError(t, err)
	require.NoError(t, stmts.Reset(ctx, "measured"))
	for range 5 {
		_, err = conn.Exec(ctx, "-- name: SeriesSum :one\nSELECT sum(g) FROM generate_series(1, $1::int) g", 10)
		require.NoError(t, err)
	}
	_, err = admin.Exec(ctx, "-- name: SeriesSum :one\nSELECT sum(g) FROM generate_series(1, $1::int) g", 10)
	require.NoError(t, err)

	got, err := stmts.Read(ctx, "measured")
	require.NoError(t, err)
	require.Len(t, got, 1, "only the measured database's statements since the reset: %+v", got)
	require.Equal(t, "SeriesSum", got[0].Name)
	require.Equal(t, int64(5), got[0].Calls)
}
