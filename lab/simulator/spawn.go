package simulator

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"boxoffice/testkit/procs"
)

// StackConfig configures a stack of separate processes started from one
// boxoffice binary.
type StackConfig struct {
	// Bin is the boxoffice binary. Defaults to os.Executable().
	Bin string
	// Dir holds the processes' logs and NATS stores. Required.
	Dir string
	// DatabaseURL names the PostgreSQL server (and, unless FreshDatabase,
	// the database) to use. Required.
	DatabaseURL string
	// FreshDatabase creates a new database on DatabaseURL's server, and
	// Close drops it again unless KeepDatabase. Defaults to false.
	FreshDatabase, KeepDatabase bool
	// JWTSecret signs bearer tokens. Defaults to a random secret.
	JWTSecret string
	// HoldTTL is how long a hold lasts. Defaults to 1m, so walked-away
	// holds expire within a run.
	HoldTTL time.Duration
	// RedisURL, when set, gives the API processes one shared waiting room.
	// Defaults to empty: each API process has its own.
	RedisURL string
	// APIs, Relays and Workers are how many processes of each role run.
	// Default to 2, 1 and 2.
	APIs, Relays, Workers int
	// Payments is how the stack takes payments: PaymentsStripe (the
	// product's real Stripe client against the in-memory Stripe stand-in,
	// lab/memstripe, a process of its own, as production pays Stripe
	// over the network) or PaymentsSandbox (the development sandbox inside
	// the API processes, on their database and pools). Defaults to
	// PaymentsStripe.
	Payments string
	// DBMaxConns is each process's pool size. Defaults to 8.
	DBMaxConns int
	// AdmissionRate is the R the API processes' release controllers
	// start at (BOXOFFICE_ADMISSION_RATE). Defaults to the product's
	// default.
	AdmissionRate float64
	// Logger receives lifecycle messages. Defaults to discarding them.
	Logger *slog.Logger
	// StartedFunc, when set, is called with each process's name and pid
	// whenever it starts (again after a Restart): CPUMeter.Place puts it
	// in its part's CPU group. An error stops the start. Defaults to nil.
	StartedFunc func(name string, pid int) error
}

// The payment providers a stack can take payments with (StackConfig.Payments).
const (
	PaymentsStripe  = "stripe"
	PaymentsSandbox = "sandbox"
)

// Stack is a running set of processes: a 3-node NATS cluster (the
// binary's hidden nats-node command), API, relay and worker processes.
type Stack struct {
	cfg         StackConfig
	DatabaseURL string
	NATSURL     string
	APIs        []string
	JWTSecret   string
	// StripeBase is the Stripe stand-in's URL (PaymentsStripe), where
	// buyers confirm their PaymentIntents; empty with the sandbox.
	StripeBase string
	// Names are the processes in start order: nats-1…3, stripe (the
	// stand-in, with PaymentsStripe), api-N, relay-N,
	// worker-N.
	Names  []string
	procs  map[string]*procs.Proc
	dbName string
	// watch is Backends's connection; only Backends uses it.
	watch *pgx.Conn
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// StartStack starts the stack and waits until every process is ready. On
// error it stops whatever it started.
func StartStack(ctx context.Context, cfg StackConfig) (_ *Stack, err error) {
	if cfg.Dir == "" || cfg.DatabaseURL == "" {
		return nil, errors.New("onsale stack: Dir and DatabaseURL are required")
	}
	if cfg.Bin == "" {
		if cfg.Bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("onsale stack: find own binary: %w", err)
		}
	}
	cfg.JWTSecret = cmp.Or(cfg.JWTSecret, randomHex(32))
	cfg.HoldTTL = cmp.Or(cfg.HoldTTL, time.Minute)
	cfg.APIs, cfg.Relays, cfg.Workers = cmp.Or(cfg.APIs, 2), cmp.Or(cfg.Relays, 1), cmp.Or(cfg.Workers, 2)
	cfg.DBMaxConns = cmp.Or(cfg.DBMaxConns, 8)
	cfg.Payments = cmp.Or(cfg.Payments, PaymentsStripe)
	if cfg.Payments != PaymentsStripe && cfg.Payments != PaymentsSandbox {
		return nil, fmt.Errorf("onsale stack: payments %q: want %s or %s", cfg.Payments, PaymentsStripe, PaymentsSandbox)
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	s := &Stack{cfg: cfg, procs: map[string]*procs.Proc{}, DatabaseURL: cfg.DatabaseURL, JWTSecret: cfg.JWTSecret}
	defer func() {
		if err != nil {
			s.Close(context.WithoutCancel(ctx))
		}
	}()
	if cfg.FreshDatabase {
		if err := s.createDatabase(ctx); err != nil {
			return nil, err
		}
	}

	// A 3-node JetStream cluster on loopback, each node a process.
	var client, cluster, monitor [3]int
	for i := range 3 {
		for _, p := range []*int{&client[i], &cluster[i], &monitor[i]} {
			if *p, err = procs.FreePort(); err != nil {
				return nil, err
			}
		}
	}
	var urls []string
	health := map[*procs.Proc]string{}
	for i := range 3 {
		var routes []string
		for j := range 3 {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", cluster[j]))
			}
		}
		name := fmt.Sprintf("nats-%d", i+1)
		p, err := s.add(name, nil, "nats-node", "-name", name, "-port", fmt.Sprint(client[i]),
			"-cluster-port", fmt.Sprint(cluster[i]), "-http-port", fmt.Sprint(monitor[i]),
			"-routes", strings.Join(routes, ","), "-store", filepath.Join(cfg.Dir, name))
		if err != nil {
			return nil, err
		}
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", client[i]))
		health[p] = fmt.Sprintf("http://127.0.0.1:%d/healthz?js-enabled-only=true", monitor[i])
	}
	for p, u := range health {
		if err := procs.WaitHTTP(ctx, p, u, 60*time.Second); err != nil {
			return nil, err
		}
	}
	s.NATSURL = strings.Join(urls, ",")

	apiPorts := make([]int, cfg.APIs)
	for i := range apiPorts {
		if apiPorts[i], err = procs.FreePort(); err != nil {
			return nil, err
		}
	}
	ticketSeed := make([]byte, 32)
	_, _ = rand.Read(ticketSeed)
	base := []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.Getenv("HOME"),
		"DATABASE_URL=" + s.DatabaseURL,
		fmt.Sprintf("DATABASE_MAX_CONNS=%d", cfg.DBMaxConns),
		"NATS_URL=" + s.NATSURL,
		"BOXOFFICE_STREAM_REPLICAS=3",
		"BOXOFFICE_JWT_SECRET=" + cfg.JWTSecret,
		"BOXOFFICE_ADMISSION_KEY=" + randomHex(32),
		"STRIPE_WEBHOOK_SECRET=whsec_" + randomHex(24),
		"BOXOFFICE_TICKET_SIGNING_KEY=" + base64.StdEncoding.EncodeToString(ticketSeed),
		// 32 random hex digits are the 32 bytes of the key.
		"BOXOFFICE_WEBHOOK_SECRET_KEYS=sim:" + base64.StdEncoding.EncodeToString([]byte(randomHex(16))),
		"BOXOFFICE_HOLD_TTL=" + cfg.HoldTTL.String(),
		"BOXOFFICE_WAITINGROOM_IP_LIMIT=-1", // every simulated buyer comes from 127.0.0.1
		"BOXOFFICE_EVENT_READ_IP_LIMIT=-1",  // and reads the seat map from there
	}
	// Stripe's webhooks (the stand-in's or the sandbox's) go to the first
	// API process.
	webhookURL := fmt.Sprintf("http://127.0.0.1:%d/v1/webhooks/stripe", apiPorts[0])
	if cfg.Payments == PaymentsSandbox {
		base = append(base, "BOXOFFICE_PAYMENTS=sandbox", "BOXOFFICE_SANDBOX_WEBHOOK_URL="+webhookURL)
	} else {
		port, err := procs.FreePort()
		if err != nil {
			return nil, err
		}
		s.StripeBase = fmt.Sprintf("http://127.0.0.1:%d", port)
		base = append(base, "BOXOFFICE_PAYMENTS=stripe", "STRIPE_SECRET_KEY=sk_test_"+randomHex(16), "STRIPE_API_BASE="+s.StripeBase)
		if _, err := s.add("stripe", base, "bench-part", "stripe", "-addr", fmt.Sprintf("127.0.0.1:%d", port), "-webhook-url", webhookURL); err != nil {
			return nil, err
		}
		if err := waitListening(ctx, fmt.Sprintf("127.0.0.1:%d", port), 30*time.Second); err != nil {
			return nil, err
		}
	}
	if cfg.RedisURL != "" {
		base = append(base, "REDIS_URL="+cfg.RedisURL)
	}
	if cfg.AdmissionRate > 0 {
		base = append(base, fmt.Sprintf("BOXOFFICE_ADMISSION_RATE=%g", cfg.AdmissionRate))
	}
	migrate := exec.CommandContext(ctx, cfg.Bin, "migrate")
	migrate.Env = base
	if out, err := migrate.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("boxoffice migrate: %w: %s", err, lastLines(string(out), 5))
	}
	ready := map[*procs.Proc]string{}
	for i, port := range apiPorts {
		ops, err := procs.FreePort()
		if err != nil {
			return nil, err
		}
		env := append(base[:len(base):len(base)], fmt.Sprintf("HTTP_ADDR=127.0.0.1:%d", port), fmt.Sprintf("OPS_ADDR=127.0.0.1:%d", ops))
		p, err := s.add(fmt.Sprintf("api-%d", i+1), env, "serve")
		if err != nil {
			return nil, err
		}
		s.APIs = append(s.APIs, fmt.Sprintf("http://127.0.0.1:%d", port))
		ready[p] = fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
	}
	roles := map[string]int{"relay": cfg.Relays, "work": cfg.Workers}
	for _, role := range []string{"relay", "work"} {
		for i := range roles[role] {
			ops, err := procs.FreePort()
			if err != nil {
				return nil, err
			}
			name := fmt.Sprintf("%s-%d", strings.Replace(role, "work", "worker", 1), i+1)
			env := append(base[:len(base):len(base)], fmt.Sprintf("OPS_ADDR=127.0.0.1:%d", ops))
			p, err := s.add(name, env, role)
			if err != nil {
				return nil, err
			}
			ready[p] = fmt.Sprintf("http://127.0.0.1:%d/readyz", ops)
		}
	}
	for p, u := range ready {
		if err := procs.WaitHTTP(ctx, p, u, 90*time.Second); err != nil {
			return nil, err
		}
	}
	cfg.Logger.InfoContext(ctx, "stack ready", "dir", cfg.Dir, "apis", strings.Join(s.APIs, ","), "processes", len(s.Names))
	return s, nil
}

func (s *Stack) add(name string, env []string, args ...string) (*procs.Proc, error) {
	p, err := procs.New(procs.Spec{Name: name, Bin: s.cfg.Bin, Args: args, Env: env, LogPath: s.LogPath(name), OwnGroup: true})
	if err != nil {
		return nil, err
	}
	s.procs[name] = p
	s.Names = append(s.Names, name)
	return p, s.start(name, p)
}

// start starts p and tells StartedFunc.
func (s *Stack) start(name string, p *procs.Proc) error {
	if err := p.Start(); err != nil {
		return err
	}
	if s.cfg.StartedFunc != nil {
		if err := s.cfg.StartedFunc(name, p.Pid()); err != nil {
			return fmt.Errorf("started %s: %w", name, err)
		}
	}
	return nil
}

// createDatabase creates a fresh database on the configured server and
// points the stack at it. DDL on the server is outside what sqlc
// generates, hence the literal statement.
func (s *Stack) createDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect to create a database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	s.dbName = "boxoffice_onsale_" + randomHex(6)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{s.dbName}.Sanitize()); err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	u, err := url.Parse(s.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	u.Path = "/" + s.dbName
	s.DatabaseURL = u.String()
	return nil
}

// DatabaseName is the fresh database's name, or "" when none was created.
func (s *Stack) DatabaseName() string { return s.dbName }

// Backends are the pids of the PostgreSQL server's processes connected
// to the run's database now (pg_stat_activity): the roles' pools, whose
// connections last the run, and autovacuum workers. It reads through a
// connection of its own to DatabaseURL's maintenance database, so its own
// backend is not among them. Call it from one goroutine at a time. The
// statement reads a server view, no package's table.
func (s *Stack) Backends(ctx context.Context) ([]int, error) {
	if s.watch == nil {
		conn, err := pgx.Connect(ctx, s.cfg.DatabaseURL)
		if err != nil {
			return nil, fmt.Errorf("connect to read backends: %w", err)
		}
		s.watch = conn
	}
	u, err := url.Parse(s.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	rows, err := s.watch.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = $1", strings.TrimPrefix(u.Path, "/"))
	if err != nil {
		return nil, fmt.Errorf("read backends: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[int])
}

// Kill SIGKILLs the named process.
func (s *Stack) Kill(name string) error {
	p, ok := s.procs[name]
	if !ok {
		return fmt.Errorf("no process %q", name)
	}
	return p.Kill()
}

// Restart starts the named process again (after Kill).
func (s *Stack) Restart(name string) error {
	p, ok := s.procs[name]
	if !ok {
		return fmt.Errorf("no process %q", name)
	}
	return s.start(name, p)
}

// LogPath is where the named process writes its output.
func (s *Stack) LogPath(name string) string { return filepath.Join(s.cfg.Dir, name+".log") }

// Close stops every process (SIGTERM, then SIGKILL after 15s), closes the
// logs and drops a fresh database unless it is to be kept.
func (s *Stack) Close(ctx context.Context) {
	var wg sync.WaitGroup
	// Roles first, then NATS and the Stripe stand-in, so the roles drain
	// against a live bus and provider.
	for _, group := range [][]string{{"api-", "relay-", "worker-"}, {"nats-", "stripe"}} {
		for name, p := range s.procs {
			for _, prefix := range group {
				if strings.HasPrefix(name, prefix) {
					wg.Go(p.Stop)
				}
			}
		}
		wg.Wait()
	}
	for _, p := range s.procs {
		_ = p.Close()
	}
	if s.watch != nil {
		_ = s.watch.Close(ctx)
	}
	if s.dbName != "" && !s.cfg.KeepDatabase {
		conn, err := pgx.Connect(ctx, s.cfg.DatabaseURL)
		if err == nil {
			_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{s.dbName}.Sanitize()+" WITH (FORCE)")
			conn.Close(ctx)
		}
		if err != nil {
			s.cfg.Logger.WarnContext(ctx, "drop the run's database", "database", s.dbName, "error", err.Error())
		}
	}
}

// waitListening waits until something accepts connections at addr.
func waitListening(ctx context.Context, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	for {
		if c, err := d.DialContext(ctx, "tcp", addr); err == nil {
			return c.Close()
		}
		if sleep(ctx, 100*time.Millisecond) != nil {
			return fmt.Errorf("%s not listening after %s", addr, timeout)
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
