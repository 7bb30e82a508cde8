package bench

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"boxoffice/platform/pgcluster"
)

// StatementSettings returns the server settings Statements needs — the
// pg_stat_statements module loaded at start, tracking top-level statements
// (a server-side function counts as the statement that called it) — or
// none when this machine's PostgreSQL lacks the module (it ships with the
// server's contrib modules, as Debian's postgresql packages do).
func StatementSettings() []string {
	bin, err := pgcluster.BinDir()
	if err != nil {
		return nil
	}
	if _, err := os.Stat(filepath.Join(bin, "..", "lib", "pg_stat_statements.so")); err != nil {
		return nil
	}
	return []string{"shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=top"}
}

// Statement is what PostgreSQL spent on one statement over a window, by
// pg_stat_statements: exact counts of calls, shared buffers read (hit or
// not) and WAL records, and the executor's wall time, lock waits included.
type Statement struct {
	Name       string // the sqlc query name, or the statement's first words
	Calls      int64
	Blocks     int64 // shared buffers hit or read
	WALRecords int64
	ExecMs     float64
}

// Statements reads and resets the statements of one database through a
// server whose pg_stat_statements module is loaded (StatementSettings);
// adminURL's database holds the extension's view.
type Statements struct{ AdminURL string }

// Available creates the extension's view when the module is loaded; false
// (and no error) when it is not, as on a server started without it.
func (s Statements) Available(ctx context.Context) (bool, error) {
	conn, err := pgx.Connect(ctx, s.AdminURL)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var loaded bool
	if err := conn.QueryRow(ctx,
		"SELECT 'pg_stat_statements' = ANY (string_to_array(current_setting('shared_preload_libraries'), ','))").Scan(&loaded); err != nil {
		return false, fmt.Errorf("read shared_preload_libraries: %w", err)
	}
	if !loaded {
		return false, nil
	}
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return false, fmt.Errorf("create extension pg_stat_statements: %w", err)
	}
	return true, nil
}

// Reset forgets what database dbName's statements have cost so far.
func (s Statements) Reset(ctx context.Context, dbName string) error {
	conn, err := pgx.Connect(ctx, s.AdminURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database WHERE datname = $1), 0)", dbName)
	if err != nil {
		return fmt.Errorf("reset pg_stat_statements of %s: %w", dbName, err)
	}
	return nil
}

// Read returns database dbName's statements since its last Reset, the
// costliest (in buffers) first. Statements of the same name (the same
// sqlc query planned for other parameter types) are summed.
func (s Statements) Read(ctx context.Context, dbName string) ([]Statement, error) {
	conn, err := pgx.Connect(ctx, s.AdminURL)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `
		SELECT query, calls, shared_blks_hit + shared_blks_read, wal_records, total_exec_time
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) AND toplevel`, dbName)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements of %s: %w", dbName, err)
	}
	byName := map[string]int{} // index in out
	var out []Statement
	for rows.Next() {
		var (
			query string
			st    Statement
		)
		if err := rows.Scan(&query, &st.Calls, &st.Blocks, &st.WALRecords, &st.ExecMs); err != nil {
			return nil, fmt.Errorf("scan pg_stat_statements: %w", err)
		}
		st.Name = statementName(query)
		if i, ok := byName[st.Name]; ok {
			prev := &out[i]
			prev.Calls += st.Calls
			prev.Blocks += st.Blocks
			prev.WALRecords += st.WALRecords
			prev.ExecMs += st.ExecMs
			continue
		}
		byName[st.Name] = len(out)
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read pg_stat_statements of %s: %w", dbName, err)
	}
	slices.SortFunc(out, func(a, b Statement) int { return cmp.Compare(b.Blocks, a.Blocks) })
	return out, nil
}

var sqlcName = regexp.MustCompile(`--\s*name:\s*(\w+)`)

// statementName is a query's sqlc name ("-- name: HoldReserve :one"), or
// its first words.
func statementName(query string) string {
	if m := sqlcName.FindStringSubmatch(query); m != nil {
		return m[1]
	}
	words := strings.Fields(query)
	if len(words) > 6 {
		words = words[:6]
	}
	return strings.Join(words, " ")
}
