package bench

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"boxoffice/pgcluster"
)

// PGBench runs shared/bench/pgbench-hold.sql — the seed's hold transaction
// as bare SQL — against a database of its own on the server of adminURL.
type PGBench struct {
	// ScriptDir holds pgbench-hold-schema.sql and pgbench-hold.sql.
	ScriptDir string
	// AdminURL is a URL of the server's maintenance database.
	AdminURL string
}

const pgbenchDB = "boxoffice_pgbench"

// Prepare creates the baseline database with its 2,000,000 seats once and,
// on later runs, empties what earlier runs wrote.
func (p PGBench) Prepare(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, p.AdminURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", pgbenchDB).Scan(&exists); err != nil {
		return fmt.Errorf("look up %s: %w", pgbenchDB, err)
	}
	url, err := p.url()
	if err != nil {
		return err
	}
	if exists {
		c2, err := pgx.Connect(ctx, url)
		if err == nil {
			defer c2.Close(context.WithoutCancel(ctx))
			var seats int64
			if err := c2.QueryRow(ctx, "SELECT count(*) FROM seats").Scan(&seats); err == nil && seats == 2_000_000 {
				_, err := c2.Exec(ctx, "TRUNCATE hold_seats, holds, tickets, orders, idempotency_keys, outbox")
				return err
			}
		}
		if _, err := conn.Exec(ctx, "DROP DATABASE "+pgbenchDB+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop stale %s: %w", pgbenchDB, err)
		}
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgbenchDB); err != nil {
		return fmt.Errorf("create %s: %w", pgbenchDB, err)
	}
	psql, err := pgBinary("psql")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, psql, "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-f", filepath.Join(p.ScriptDir, "pgbench-hold-schema.sql"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("load pgbench schema: %w: %s", err, out)
	}
	return nil
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+)`)

// Run runs the baseline with clients connections for d and returns tx/s.
func (p PGBench) Run(ctx context.Context, clients int, d time.Duration) (float64, error) {
	pgbench, err := pgBinary("pgbench")
	if err != nil {
		return 0, err
	}
	url, err := p.url()
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, pgbench, "-n", "-f", filepath.Join(p.ScriptDir, "pgbench-hold.sql"),
		"-c", strconv.Itoa(clients), "-j", "2", "-T", strconv.Itoa(int(d.Seconds())), url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("pgbench: %w: %s", err, out)
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench printed no tps: %s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

func (p PGBench) url() (string, error) {
	cc, err := pgx.ParseConfig(p.AdminURL)
	if err != nil {
		return "", fmt.Errorf("parse database url: %w", err)
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cc.User, cc.Host, cc.Port, pgbenchDB), nil
}

// pgBinary finds a PostgreSQL client program on PATH or beside the local
// server binaries.
func pgBinary(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	dir, err := pgcluster.BinDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, name), nil
}
