package migrations_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/migrations"
	"boxoffice/testkit/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// emptyDatabase returns the URL of a database with no schema at all.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	url := dbtest.NewURL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP SCHEMA public CASCADE; CREATE SCHEMA public")
	require.NoError(t, err)
	return url
}

func tables(t *testing.T, url string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	return queryStrings(t, conn, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
}

// queryStrings returns the one text column of every row of query.
func queryStrings(t *testing.T, conn *pgx.Conn, query string, args ...any) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), query, args...)
	require.NoError(t, err)
	values, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return values
}

func TestUpTwiceIsANoop(t *testing.T) {
	t.Parallel()
	url := emptyDatabase(t)
	ctx := context.Background()
	require.NoError(t, migrations.Up(ctx, url))
	first := tables(t, url)
	require.Contains(t, first, "hold_seats")
	require.NoError(t, migrations.Up(ctx, url))
	require.Equal(t, first, tables(t, url))
}

// Several processes starting at once all run migrate; the advisory lock
// makes exactly one apply each version and the others wait and succeed.
func TestUpConcurrently(t *testing.T) {
	t.Parallel()
	url := emptyDatabase(t)
	ctx := context.Background()
	errs := make([]error, 6)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range errs {
		wg.Go(func() {
			<-start
			errs[i] = migrations.Up(ctx, url)
		})
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Contains(t, tables(t, url), "outbox")
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var applied, distinct int
	require.NoError(t, conn.QueryRow(ctx,
		"SELECT count(*), count(DISTINCT version_id) FROM goose_db_version WHERE version_id > 0").Scan(&applied, &distinct))
	require.Equal(t, distinct, applied, "a migration was applied twice")
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.Len(t, files, applied)
}

// TestEveryTableIsFenced keeps region-epoch fencing complete: a migration
// that adds a table must add the region_fence trigger to it too
// (migrations/00010_region_fence.sql). migrations.Unfenced lists the exceptions.
func TestEveryTableIsFenced(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	var unfenced []string
	rows, err := pool.Query(context.Background(), `
		SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
		  AND c.relname <> ALL ($1::text[])
		  AND NOT EXISTS (SELECT 1 FROM pg_trigger g WHERE g.tgrelid = c.oid AND g.tgname = 'region_fence')
		ORDER BY 1`, migrations.Unfenced)
	require.NoError(t, err)
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		unfenced = append(unfenced, name)
	}
	require.NoError(t, rows.Err())
	require.Empty(t, unfenced, "tables without the region_fence trigger")
}

var (
	functionName = regexp.MustCompile(`(?i)\bCREATE\s+OR\s+REPLACE\s+FUNCTION\s+(\w+)\s*\(`)
	functionBody = regexp.MustCompile(`(?s)\bAS \$\$(.*)\$\$;`)
)

// functionSources returns the source in pg_proc of every function called
// name in the database's schema, one per signature.
func functionSources(t *testing.T, conn *pgx.Conn, name string) []string {
	t.Helper()
	return queryStrings(t, conn, `
		SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = current_schema() AND p.proname = $1`, name)
}

// TestDatabaseRunsTheFunctionFiles holds the database to functions/: after
// a fresh migrate, each function defined there exists with one signature
// only, and its source in pg_proc is, to the byte, the body between the
// file's $$ quotes. So the file is what runs, not an older definition. A
// database whose function has drifted gets the file's body back at its
// next migrate.
func TestDatabaseRunsTheFunctionFiles(t *testing.T) {
	t.Parallel()
	url := emptyDatabase(t)
	ctx := context.Background()
	require.NoError(t, migrations.Up(ctx, url))
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)

	paths, err := filepath.Glob("functions/*.sql")
	require.NoError(t, err)
	embedded, err := fs.Glob(migrations.FS, "functions/*.sql")
	require.NoError(t, err)
	require.Equal(t, paths, embedded, "functions/ on disk and embedded differ")
	require.Contains(t, paths, "functions/hold_reserve.sql")
	for _, path := range paths {
		text, err := os.ReadFile(path)
		require.NoError(t, err)
		names := functionName.FindAllStringSubmatch(string(text), -1)
		require.Len(t, names, 1, "%s: one CREATE OR REPLACE FUNCTION a file", path)
		name := names[0][1]
		require.Equal(t, strings.TrimSuffix(filepath.Base(path), ".sql"), name, "%s: file named after its function", path)
		bodies := functionBody.FindAllStringSubmatch(string(text), -1)
		require.Len(t, bodies, 1, "%s: one AS $$ ... $$; body", path)
		body := bodies[0][1]

		require.Equal(t, []string{body}, functionSources(t, conn, name), "%s: the database runs another %s", path, name)

		// Drift the body, as an older version of the file would have left
		// it; the next migrate restores the file's.
		drifted := strings.Replace(string(text), "AS $$", "AS $$\n-- drifted", 1)
		_, err = conn.Exec(ctx, drifted)
		require.NoError(t, err)
		require.NotEqual(t, []string{body}, functionSources(t, conn, name))
		require.NoError(t, migrations.Up(ctx, url))
		require.Equal(t, []string{body}, functionSources(t, conn, name), "%s: migrate did not restore %s", path, name)
	}
}
