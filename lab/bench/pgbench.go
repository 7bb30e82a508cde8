package bench

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"boxoffice/platform/pgcluster"
)

// PGBench runs one of shared/bench's baselines — pgbench-hold.sql, the
// hold transaction of a straightforward implementation as bare SQL, or pgbench-purchase.sql, a whole
// order as the 8 plain-SQL transactions of a straightforward
// implementation — against a database of its own on the server of
// AdminURL.
type PGBench struct {
	// ScriptDir holds pgbench-<Script>-schema.sql and pgbench-<Script>.sql.
	ScriptDir string
	// AdminURL is a URL of the server's maintenance database.
	AdminURL string
	// Script names the baseline: "hold" or "purchase". Defaults to "hold".
	Script string
}

// The tables each baseline's runs write, emptied before a run.
var pgbenchWritten = map[string]string{
	"hold":     "hold_seats, holds, tickets, orders, idempotency_keys, outbox",
	"purchase": "hold_seats, holds, tickets, payments, orders, idempotency_keys, outbox, inbox, stripe_events",
}

func (p PGBench) script() string {
	if p.Script == "" {
		return "hold"
	}
	return p.Script
}

// db is the baseline's database: the hold's keeps its historical name.
func (p PGBench) db() string {
	if p.script() == "hold" {
		return "boxoffice_pgbench"
	}
	return "boxoffice_pgbench_" + p.script()
}

// Prepare creates the baseline database with its 2,000,000 seats once and,
// on later runs, empties what earlier runs wrote.
func (p PGBench) Prepare(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, p.AdminURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	written, ok := pgbenchWritten[p.script()]
	if !ok {
		return fmt.Errorf("no pgbench baseline %q", p.script())
	}
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", p.db()).Scan(&exists); err != nil {
		return fmt.Errorf("look up %s: %w", p.db(), err)
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
				_, err := c2.Exec(ctx, "TRUNCATE "+written)
				return err
			}
		}
		if _, err := conn.Exec(ctx, "DROP DATABASE "+p.db()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop stale %s: %w", p.db(), err)
		}
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+p.db()); err != nil {
		return fmt.Errorf("create %s: %w", p.db(), err)
	}
	psql, err := pgBinary("psql")
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, psql, "-q", "-v", "ON_ERROR_STOP=1", "-d", url, "-f", filepath.Join(p.ScriptDir, "pgbench-"+p.script()+"-schema.sql"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("load pgbench schema: %w: %s", err, out)
	}
	return nil
}

var tpsLine = regexp.MustCompile(`tps = ([0-9.]+)`)

// Run runs the baseline with clients connections for d and returns tx/s.
func (p PGBench) Run(ctx context.Context, clients int, d time.Duration) (float64, error) {
	return p.RunWith(ctx, PGBenchRun{Clients: clients, Duration: d})
}

// PGBenchRun is how RunWith runs a baseline.
type PGBenchRun struct {
	Clients  int
	Duration time.Duration
	// Prepared runs it with -M prepared, from pgbench-<script>-prepared.sql:
	// statements parsed and planned once per connection, as pgx does for
	// the product's.
	Prepared bool
	// Rate, when positive, is pgbench's -R: transactions started per
	// second, whatever the server's pace.
	Rate float64
	// Group, when set, is the CPU group pgbench itself runs in, so that
	// the load generator is measured apart from the server.
	Group *CPUGroup
}

// RunWith runs the baseline as run says and returns tx/s.
func (p PGBench) RunWith(ctx context.Context, run PGBenchRun) (float64, error) {
	pgbench, err := pgBinary("pgbench")
	if err != nil {
		return 0, err
	}
	url, err := p.url()
	if err != nil {
		return 0, err
	}
	script, args := "pgbench-"+p.script()+".sql", []string{"-n"}
	if run.Prepared {
		script, args = "pgbench-"+p.script()+"-prepared.sql", append(args, "-M", "prepared")
	}
	if run.Rate > 0 {
		args = append(args, "-R", strconv.FormatFloat(run.Rate, 'f', 1, 64))
	}
	args = append(args, "-f", filepath.Join(p.ScriptDir, script),
		"-c", strconv.Itoa(run.Clients), "-j", "2", "-T", strconv.Itoa(int(run.Duration.Seconds())), url)
	cmd := exec.CommandContext(ctx, pgbench, args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("pgbench: %w", err)
	}
	if run.Group != nil {
		if err := run.Group.Add(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return 0, err
		}
	}
	err = cmd.Wait()
	out := buf.Bytes()
	if err != nil {
		return 0, fmt.Errorf("pgbench: %w: %s", err, out)
	}
	m := tpsLine.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench printed no tps: %s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

// Database is the baseline database's name.
func (p PGBench) Database() string { return p.db() }

// URL is the baseline database's URL.
func (p PGBench) URL() (string, error) { return p.url() }

func (p PGBench) url() (string, error) {
	cc, err := pgx.ParseConfig(p.AdminURL)
	if err != nil {
		return "", fmt.Errorf("parse database url: %w", err)
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cc.User, cc.Host, cc.Port, p.db()), nil
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
