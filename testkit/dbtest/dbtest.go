// Package dbtest hands each test its own fresh, fully migrated PostgreSQL
// database, cloned in milliseconds from a template database that holds the
// schema in boxoffice/migrations.
//
// The server is chosen once per test process: TEST_DATABASE_URL if set,
// else DATABASE_URL if set, else a private cluster started with pgcluster
// from the PostgreSQL binaries installed on the machine. The URL must name
// a role that may create databases (a superuser is simplest); its database
// is used only to create and drop the test databases.
//
// The template is named after a hash of the migration files, so a schema
// change gets a new template while an unchanged schema reuses the existing
// one across runs and across test packages. Test databases are named
// boxoffice_test_<random hex> and dropped when their test ends.
//
// A private cluster is stopped and its directory deleted when the test
// process exits, however it exits. Packages may call Main from TestMain to
// stop it before the process exits instead:
//
//	func TestMain(m *testing.M) { dbtest.Main(m) }
package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/migrations"
	"boxoffice/platform/db"
	"boxoffice/platform/pgcluster"
)

// MaxConns is the size of the pool New returns.
const MaxConns = 32

// templateLockID is the pg_advisory_lock key that serialises template
// creation across test processes sharing a server.
const templateLockID = 0x626f78_7464_62 // "box" "td" "b"

// setupTimeout bounds starting a private cluster and building the
// template; they happen once per process.
const setupTimeout = 3 * time.Minute

// opTimeout bounds creating or dropping one test database, and each query
// run by Exec and Count.
const opTimeout = time.Minute

var (
	setupOnce sync.Once
	setupErr  error
	// admin is a pool on the server's maintenance database, used to
	// create and drop test databases.
	admin *pgxpool.Pool
	// adminURL is the URL of the maintenance database.
	adminURL string
	// template is the name of the migrated template database.
	template string
	// cluster is the private cluster, if one was started.
	cluster *pgcluster.Cluster
)

// New creates a brand-new database holding the migrated schema and nothing
// else, and returns a pool of at most MaxConns connections to it. When the
// test ends the pool is closed and the database dropped. Tests may run in
// parallel: each gets a database of its own.
func New(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	dbURL := NewURL(tb)
	cfg, err := pgxpool.ParseConfig(dbURL)
	require.NoError(tb, err, "dbtest: parse database URL")
	cfg.MaxConns = MaxConns
	db.Configure(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(tb, err, "dbtest: open pool")
	// Cleanups run last-registered first: the pool closes before NewURL's
	// cleanup drops the database.
	tb.Cleanup(pool.Close)
	return pool
}

// NewTraced is New through db.NewPool with a cost tracer: a pool on a
// fresh migrated database whose statements, transactions and round trips
// the returned tracer counts, by the role db.WithRole names.
func NewTraced(tb testing.TB) (*pgxpool.Pool, *db.CostTracer) {
	tb.Helper()
	costs := db.NewCostTracer()
	pool, err := db.NewPool(context.Background(), db.PoolConfig{URL: NewURL(tb), Tracer: costs})
	require.NoError(tb, err, "dbtest: open traced pool")
	tb.Cleanup(pool.Close)
	return pool, costs
}

// NewURL creates a brand-new database holding the migrated schema and
// nothing else, and returns its connection URL without connecting to it,
// for tests that start a whole server from a URL. When the test ends the
// database is dropped, disconnecting anyone still connected.
func NewURL(tb testing.TB) string {
	tb.Helper()
	require.NoError(tb, setup(), "dbtest: prepare test database server")

	name := "boxoffice_test_" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{template}.Sanitize())
	require.NoError(tb, err, "dbtest: create database %s from template %s", name, template)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		_, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		require.NoError(tb, err, "dbtest: drop database %s", name)
	})

	dbURL, err := withDatabase(adminURL, name)
	require.NoError(tb, err, "dbtest: build database URL")
	return dbURL
}

// Exec runs sql with args on pool and fails the test if it errors.
func Exec(tb testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_, err := pool.Exec(ctx, sql, args...)
	require.NoError(tb, err, "dbtest: exec %s", sql)
}

// Count runs sql, a query returning one row with one integer column such
// as select count(*) ..., and returns that integer. It fails the test if
// the query errors or does not return exactly such a row.
func Count(tb testing.TB, pool *pgxpool.Pool, sql string, args ...any) int64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	var n int64
	require.NoError(tb, pool.QueryRow(ctx, sql, args...).Scan(&n), "dbtest: count %s", sql)
	return n
}

// Main runs the tests in m, then closes dbtest's connections and stops the
// private cluster if this process started one, and exits with the tests'
// exit code. Call it from TestMain:
//
//	func TestMain(m *testing.M) { dbtest.Main(m) }
//
// It is optional: without it a private cluster is stopped, and its
// directory deleted, shortly after the process exits.
func Main(m *testing.M) {
	code := m.Run()
	if admin != nil {
		admin.Close()
	}
	if cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		if err := cluster.Stop(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "dbtest:", err)
			code = max(code, 1)
		}
		cancel()
	}
	os.Exit(code)
}

// setup picks the server and makes sure the template exists, once per
// process.
func setup() error {
	setupOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		setupErr = doSetup(ctx)
	})
	return setupErr
}

func doSetup(ctx context.Context) error {
	adminURL = os.Getenv("TEST_DATABASE_URL")
	if adminURL == "" {
		adminURL = os.Getenv("DATABASE_URL")
	}
	if adminURL == "" {
		dir, err := os.MkdirTemp("", "boxoffice-dbtest-")
		if err != nil {
			return fmt.Errorf("create cluster directory: %w", err)
		}
		cluster, err = pgcluster.Start(ctx, pgcluster.Config{Dir: dir, Fast: true, Temporary: true})
		if err != nil {
			_ = os.RemoveAll(dir)
			return fmt.Errorf("neither TEST_DATABASE_URL nor DATABASE_URL is set, and a private cluster could not be started: %w", err)
		}
		adminURL = cluster.URL()
	}

	var err error
	template, err = ensureTemplate(ctx, adminURL)
	if err != nil {
		return err
	}

	cfg, err := pgxpool.ParseConfig(adminURL)
	if err != nil {
		return fmt.Errorf("parse database URL: %w", err)
	}
	cfg.MaxConns = 8
	admin, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(adminURL), err)
	}
	return nil
}

// templateName derives the template's name from the migration files' names
// and contents.
func templateName() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash migrations: %w", err)
	}
	return "boxoffice_tmpl_" + hex.EncodeToString(h.Sum(nil))[:12], nil
}

// ensureTemplate creates the migrated template unless it exists, and
// returns its name. Test processes sharing the server serialise on an
// advisory lock; the template is built under a temporary name and renamed
// once complete, so a half-built one is never used.
func ensureTemplate(ctx context.Context, serverURL string) (string, error) {
	name, err := templateName()
	if err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", redact(serverURL), err)
	}
	// Closing the session also releases the advisory lock.
	defer conn.Close(context.WithoutCancel(ctx))

	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(templateLockID)); err != nil {
		return "", fmt.Errorf("lock template creation: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(templateLockID))
	}()

	var exists, isTemplate bool
	err = conn.QueryRow(ctx, "SELECT true, datistemplate FROM pg_database WHERE datname = $1", name).Scan(&exists, &isTemplate)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("look up template %s: %w", name, err)
	}
	if !exists {
		if err := buildTemplate(ctx, conn, serverURL, name); err != nil {
			return "", fmt.Errorf("build template %s: %w", name, err)
		}
	}
	if !isTemplate {
		// Nobody may connect to the template: CREATE DATABASE ... TEMPLATE
		// fails while anyone is connected to it.
		_, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false")
		if err != nil {
			return "", fmt.Errorf("mark %s as template: %w", name, err)
		}
	}
	return name, nil
}

// buildTemplate creates database name holding the migrated schema. The
// caller holds the template lock.
func buildTemplate(ctx context.Context, conn *pgx.Conn, serverURL, name string) error {
	building := name + "_building"
	ident := pgx.Identifier{building}.Sanitize()
	// A crashed run may have left a half-built one.
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop leftover %s: %w", building, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident+" TEMPLATE template0 ENCODING 'UTF8'"); err != nil {
		return fmt.Errorf("create %s: %w", building, err)
	}
	buildingURL, err := withDatabase(serverURL, building)
	if err != nil {
		return err
	}
	if err := migrations.Up(ctx, buildingURL); err != nil {
		return fmt.Errorf("migrate %s: %w", building, err)
	}
	// migrations.Up has closed its connections, but their backends may
	// still be exiting; RENAME waits a few seconds for them.
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("rename %s: %w", building, err)
	}
	return nil
}

// withDatabase returns the connection string serverURL with its database
// replaced by name. It accepts URLs and keyword/value strings.
func withDatabase(serverURL, name string) (string, error) {
	if strings.HasPrefix(serverURL, "postgres://") || strings.HasPrefix(serverURL, "postgresql://") {
		u, err := url.Parse(serverURL)
		if err != nil {
			return "", fmt.Errorf("parse database URL: %w", err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		// A dbname parameter would override the path.
		q := u.Query()
		if q.Has("dbname") {
			q.Del("dbname")
			u.RawQuery = q.Encode()
		}
		return u.String(), nil
	}
	// In keyword/value strings the last setting of a keyword wins.
	return serverURL + " dbname=" + name, nil
}

// redact hides the password in a URL for error messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "the database server"
	}
	return u.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
