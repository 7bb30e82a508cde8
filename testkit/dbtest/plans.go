package dbtest

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/db"
)

// NewSession is New with a pool of one connection: every statement runs
// on the same server session, so one plan cache serves them all (what
// tests of PostgreSQL's plan caching need; pg_prepared_statements counts
// the session's custom and generic plans).
func NewSession(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	pool, _ := newSession(tb, nil)
	return pool
}

// PlanLog collects the plans auto_explain reports for a session.
type PlanLog struct {
	mu    sync.Mutex
	plans []string
}

// Plans returns the plans logged since the last Reset, oldest first,
// each as auto_explain's text ("Query Text: …" and the plan).
func (l *PlanLog) Plans() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.plans...)
}

// Of returns the plans logged of the statement whose text starts with
// prefix, oldest first.
func (l *PlanLog) Of(prefix string) []string {
	var out []string
	for _, p := range l.Plans() {
		if strings.Contains(p, "Query Text: "+prefix) {
			out = append(out, p)
		}
	}
	return out
}

// Prepared is what pg_prepared_statements says of one of a session's
// prepared statements: its server-side name and how often the plan cache
// planned it for the call (custom) or ran its generic plan.
type Prepared struct {
	Name            string
	Generic, Custom int64
}

// PreparedPlans returns the session's prepared statement of the sqlc
// query named query (its text starts "-- name: query "). The pool must be
// one session's (NewSession).
func PreparedPlans(tb testing.TB, pool *pgxpool.Pool, query string) Prepared {
	tb.Helper()
	var p Prepared
	require.NoError(tb, pool.QueryRow(context.Background(),
		"SELECT name, generic_plans, custom_plans FROM pg_prepared_statements WHERE statement LIKE $1",
		"-- name: "+query+" %").Scan(&p.Name, &p.Generic, &p.Custom), "dbtest: prepared statement %s", query)
	return p
}

// Reset forgets the plans logged so far.
func (l *PlanLog) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.plans = nil
}

// NewSessionExplained is NewSession with auto_explain loaded in the
// session: the plan of every statement it runs, nested statements (in
// functions and triggers) included, comes back as a notice and is kept in
// the returned PlanLog, as the statement ran it (a generic plan names its
// parameters, $1; a custom plan shows their values). It skips the test
// where the server has no auto_explain (PostgreSQL's contrib modules).
func NewSessionExplained(tb testing.TB) (*pgxpool.Pool, *PlanLog) {
	tb.Helper()
	log := &PlanLog{}
	pool, loadErr := newSession(tb, log)
	if loadErr != nil {
		tb.Skipf("dbtest: auto_explain is not installed on this server: %v", loadErr)
	}
	return pool, log
}

func newSession(tb testing.TB, log *PlanLog) (*pgxpool.Pool, error) {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(NewURL(tb))
	require.NoError(tb, err, "dbtest: parse database URL")
	cfg.MaxConns = 1
	db.Configure(cfg)
	var loadErr error
	if log != nil {
		cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			log.mu.Lock()
			defer log.mu.Unlock()
			log.plans = append(log.plans, n.Message)
		}
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if _, err := c.Exec(ctx, "LOAD 'auto_explain'"); err != nil {
				loadErr = err
				return nil
			}
			_, err := c.Exec(ctx, `SET auto_explain.log_min_duration = 0;
				SET auto_explain.log_nested_statements = on;
				SET auto_explain.log_level = notice;
				SET client_min_messages = notice`)
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(tb, err, "dbtest: open pool")
	tb.Cleanup(pool.Close)
	require.NoError(tb, pool.Ping(ctx), "dbtest: connect")
	return pool, loadErr
}
