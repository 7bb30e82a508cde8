package dbtest_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/testkit/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

func TestNewDatabasesAreIndependent(t *testing.T) {
	t.Parallel()
	a := dbtest.New(t)
	b := dbtest.New(t)

	dbtest.Exec(t, a, "CREATE TABLE only_in_a (id int)")
	dbtest.Exec(t, a, "INSERT INTO only_in_a VALUES ($1)", 7)

	const q = "SELECT count(*) FROM pg_tables WHERE tablename = $1"
	require.EqualValues(t, 1, dbtest.Count(t, a, q, "only_in_a"))
	require.EqualValues(t, 0, dbtest.Count(t, b, q, "only_in_a"))
	require.EqualValues(t, 1, dbtest.Count(t, a, "SELECT count(*) FROM only_in_a"))
}

func TestNewHasMigratedSchema(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)

	require.EqualValues(t, 1, dbtest.Count(t, pool,
		"SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public' AND table_name = 'hold_seats'"))
	require.EqualValues(t, 0, dbtest.Count(t, pool, "SELECT count(*) FROM hold_seats"), "a new database holds no rows")
	require.Positive(t, dbtest.Count(t, pool, "SELECT count(*) FROM goose_db_version WHERE is_applied"))

	// The database is a clone of the shared template, which nobody may
	// connect to.
	var name string
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&name))
	require.True(t, strings.HasPrefix(name, "boxoffice_test_"), name)
	// Templates of earlier schemas may remain on a shared server.
	require.Positive(t, dbtest.Count(t, pool,
		"SELECT count(*) FROM pg_database WHERE datname LIKE 'boxoffice\\_tmpl\\_%' AND datistemplate AND NOT datallowconn AND datname NOT LIKE '%\\_building'"))
}

func TestNewURLDatabaseIsDroppedAfterTest(t *testing.T) {
	t.Parallel()
	observer := dbtest.New(t)
	var name string
	t.Cleanup(func() {
		// Runs after the subtest and its cleanups, before observer closes.
		require.NotEmpty(t, name)
		require.EqualValues(t, 0, dbtest.Count(t, observer, "SELECT count(*) FROM pg_database WHERE datname = $1", name))
	})

	t.Run("inner", func(t *testing.T) {
		t.Parallel()
		url := dbtest.NewURL(t)
		conn, err := pgx.Connect(t.Context(), url)
		require.NoError(t, err)
		// Left open on purpose: the drop disconnects it.
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&name))
		require.EqualValues(t, 1, dbtest.Count(t, observer, "SELECT count(*) FROM pg_database WHERE datname = $1", name))
	})
}

func TestManyDatabasesInParallel(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		names = map[string]bool{}
	)
	for i := range 16 {
		t.Run("db", func(t *testing.T) {
			t.Parallel()
			pool := dbtest.New(t)
			dbtest.Exec(t, pool, "CREATE TABLE mine (i int)")
			dbtest.Exec(t, pool, "INSERT INTO mine VALUES ($1)", i)
			require.EqualValues(t, i, dbtest.Count(t, pool, "SELECT i FROM mine"))
			var name string
			require.NoError(t, pool.QueryRow(t.Context(), "SELECT current_database()").Scan(&name))
			mu.Lock()
			defer mu.Unlock()
			require.False(t, names[name], "database %s handed out twice", name)
			names[name] = true
		})
	}
}
