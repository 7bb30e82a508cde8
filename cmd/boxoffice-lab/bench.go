package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"boxoffice/cmd/boxoffice/roles"
	"boxoffice/domain/cells"
	"boxoffice/lab/bench"
	"boxoffice/migrations"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
)

func runBench(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "waitingroom" {
		return runBenchWaitingRoom(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "purchases" {
		return runBenchPurchases(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "streams" {
		return runBenchStreams(ctx, args[1:])
	}
	if len(args) > 0 && args[0] == "retention" {
		return runBenchRetention(ctx, args[1:])
	}
	if len(args) == 0 || args[0] != "holds" {
		return fmt.Errorf("usage: boxoffice-lab bench holds|purchases|retention|streams|waitingroom [flags]")
	}
	fs := flag.NewFlagSet("bench holds", flag.ExitOnError)
	duration := fs.Duration("duration", 10*time.Second, "length of each measured phase")
	clientsFlag := fs.String("clients", "16,64", "concurrent clients of each spread-out phase")
	hotClients := fs.Int("hot-clients", 64, "clients of the hot phase")
	bestRow := fs.Int("best-row", 500, "seats per row of the best-available phases' 100,000-seat event (a pick reads the rows of its candidates: 500 is the named-seat phases' shape; 100 to 100,000, dividing 100,000 into at most 1,000 rows)")
	hotSeats := fs.Int("hot-seats", 1000, "seats the hot phase fights over")
	hotTTL := fs.Duration("hot-hold-ttl", 2*time.Second, "hold lifetime in the hot phase, so seats churn")
	scriptDir := fs.String("pgbench-dir", "../shared/bench", "directory of pgbench-hold.sql and its schema; empty skips the baseline")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	_ = fs.Parse(args[1:])
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	var clients []int
	for _, s := range strings.Split(*clientsFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-clients: %q is not a positive number", s)
		}
		clients = append(clients, n)
	}
	if *bestRow < 100 || 100_000%*bestRow != 0 {
		return fmt.Errorf("-best-row: %d does not divide 100,000 seats into at most 1,000 rows (a section's most)", *bestRow)
	}

	cfg, pool, cleanup, err := benchSetup(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	// Each client holds as fast as it can, the point of the benchmark: the
	// per-buyer limiter runs, so its cost is in the figure, but never refuses.
	cfg.HoldRateLimit = 1 << 20
	// The server under test logs only warnings: a benchmark of the hold
	// path, not of log shipping.
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))

	g, gctx := errgroup.WithContext(ctx)
	serverCtx, stopServers := context.WithCancel(gctx)
	defer stopServers()
	start := func(c roles.Config) (string, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		cell, err := roles.BuildCell(ctx, c, roles.CellDeps{Name: c.Cell, Pool: pool, Logger: logger})
		if err != nil {
			ln.Close()
			return "", err
		}
		g.Go(func() error {
			return roles.ServeHTTP(serverCtx, ln, roles.NewAPI(c, cells.Single(cell.Cell), logger, nil, nil).Handler(), logger)
		})
		return "http://" + ln.Addr().String(), nil
	}
	mainURL, err := start(cfg)
	if err != nil {
		return err
	}
	hotCfg := cfg
	hotCfg.HoldTTL = *hotTTL
	hotURL, err := start(hotCfg)
	if err != nil {
		return err
	}

	report := func(format string, args ...any) { fmt.Printf(format+"\n", args...) }
	report("boxoffice-lab bench holds — %s per phase, pool %d connections, PostgreSQL %s", *duration, pool.Config().MaxConns, roles.RedactURL(cfg.DatabaseURL))

	maxClients := max(*hotClients, clients[0])
	for _, c := range clients {
		maxClients = max(maxClients, c)
	}
	client := bench.NewClient(mainURL, cfg.JWTSecret, maxClients)
	pg := bench.PGBench{ScriptDir: *scriptDir, AdminURL: cfg.DatabaseURL}
	if *scriptDir != "" {
		if err := pg.Prepare(ctx); err != nil {
			return fmt.Errorf("prepare pgbench baseline: %w", err)
		}
	}

	report("\n%-34s %10s %10s %9s %9s %9s %8s", "phase", "holds/s", "tries/s", "p50", "p99", "conflicts", "errors")
	var ratios []string
	named := map[int]bench.HoldResult{}
	for _, n := range clients {
		ev, err := client.CreateEvent(ctx, 200, 500) // 100,000 seats
		if err != nil {
			return err
		}
		if n == clients[0] {
			report("%-34s %s", "create event, 100,000 seats", ev.Creation.Round(time.Millisecond))
		}
		r, err := client.RunHolds(ctx, ev, n, *duration)
		if err != nil {
			return err
		}
		named[n] = r
		report("%-34s %10.0f %10.0f %9s %9s %9d %8d", fmt.Sprintf("HTTP holds, %d clients, 2 seats", n),
			r.HoldsPerSec(), r.AttemptsPerSec(), r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond), r.Conflicts, r.Errors)
		if *scriptDir == "" {
			continue
		}
		tps, err := pg.Run(ctx, n, *duration)
		if err != nil {
			return err
		}
		report("%-34s %10.0f", fmt.Sprintf("pgbench hold tx, %d clients", n), tps)
		ratios = append(ratios, fmt.Sprintf("%d clients: HTTP holds/s ÷ pgbench tx/s = %.2f", n, r.HoldsPerSec()/tps))
	}
	// Best available beside the named-seat holds above, same run: each
	// client asks for the best 2 seats of a fresh event of the same size,
	// so every buyer wants the same front seats.
	for _, n := range clients {
		ev, err := client.CreateEvent(ctx, 100_000 / *bestRow, *bestRow)
		if err != nil {
			return err
		}
		r, err := client.RunBestAvailableHolds(ctx, ev, n, *duration)
		if err != nil {
			return err
		}
		report("%-34s %10.0f %10.0f %9s %9s %9d %8d", fmt.Sprintf("best available, %d clients, 2 seats, rows of %d", n, *bestRow),
			r.HoldsPerSec(), r.AttemptsPerSec(), r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond), r.Conflicts, r.Errors)
		ratios = append(ratios, fmt.Sprintf("%d clients: best-available holds/s ÷ named-seat holds/s = %.2f", n, r.HoldsPerSec()/named[n].HoldsPerSec()))
	}

	hot := bench.NewClient(hotURL, cfg.JWTSecret, *hotClients)
	ev, err := hot.CreateEvent(ctx, 1, *hotSeats)
	if err != nil {
		return err
	}
	r, err := hot.RunHolds(ctx, ev, *hotClients, *duration)
	if err != nil {
		return err
	}
	report("%-34s %10.0f %10.0f %9s %9s %9d %8d", fmt.Sprintf("hot: %d clients on %d seats", *hotClients, *hotSeats),
		r.HoldsPerSec(), r.AttemptsPerSec(), r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond), r.Conflicts, r.Errors)
	report("")
	for _, s := range ratios {
		report("%s", s)
	}
	stopServers()
	return g.Wait()
}

func dropDatabase(ctx context.Context, adminURL, name string) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// profileParts split the benchmark process's CPU profile: a sample goes to
// the outermost of its frames that names one of these.
var profileParts = []bench.Part{
	{Name: "API (HTTP server: every request, Stripe's webhooks included)", Prefixes: []string{"net/http.(*conn)"}},
	{Name: "consumers (saga, payments with their Stripe client, tickets, fan-out)", Prefixes: []string{"boxoffice/consumers."}},
	{Name: "embedded NATS server", Prefixes: []string{"github.com/nats-io/nats-server/"}},
	{Name: "relay", Prefixes: []string{"boxoffice/relay."}},
	{Name: "sandbox webhook sender", Prefixes: []string{"boxoffice/domain/payments/sandbox.(*Sandbox)"}},
	{Name: "order feed", Prefixes: []string{"boxoffice/platform/orderfeed."}},
	{Name: "webhooks dispatcher", Prefixes: []string{"boxoffice/domain/webhooks."}},
	{Name: "waiting room", Prefixes: []string{"boxoffice/domain/waitingroom."}},
	{Name: "NATS client", Prefixes: []string{"github.com/nats-io/nats.go"}},
	{Name: "pgx connections", Prefixes: []string{"github.com/jackc/pgx", "github.com/jackc/puddle"}},
}

// benchBus starts an embedded JetStream server in a temporary directory,
// points cfg at it and connects; stop closes the connection and removes
// the server and its files.
func benchBus(ctx context.Context, cfg *roles.Config, logger *slog.Logger) (*nats.Conn, jetstream.JetStream, func(), error) {
	storeDir, err := os.MkdirTemp("", "boxoffice-bench-nats-")
	if err != nil {
		return nil, nil, nil, err
	}
	ns, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: storeDir})
	if err != nil {
		os.RemoveAll(storeDir)
		return nil, nil, nil, err
	}
	cfg.NATSURL = ns.ClientURL()
	nc, js, err := roles.ConnectBus(ctx, *cfg, "bench", logger)
	if err != nil {
		ns.Shutdown()
		os.RemoveAll(storeDir)
		return nil, nil, nil, err
	}
	return nc, js, func() {
		nc.Close()
		ns.Shutdown()
		os.RemoveAll(storeDir)
	}, nil
}

// benchSetup reads the configuration (DATABASE_URL names the server; the
// secrets are dev's, payments the sandbox's: the benchmarks run the roles
// in this process, as dev does, on a database of their own) and creates a
// fresh, migrated database on that server, which cleanup drops.
func benchSetup(ctx context.Context, tracer ...pgx.QueryTracer) (roles.Config, *pgxpool.Pool, func(), error) {
	cfg, err := roles.LoadDevConfig(func(name string) string {
		switch name {
		case "BOXOFFICE_JWT_SECRET":
			return roles.DevJWTSecret
		case "BOXOFFICE_ADMISSION_KEY":
			return roles.DevAdmissionKey
		case "STRIPE_WEBHOOK_SECRET":
			return roles.DevWebhookKey
		case "BOXOFFICE_WEBHOOK_SECRET_KEYS":
			return roles.DevWebhookSecretKeys
		case "BOXOFFICE_PAYMENTS":
			return "sandbox"
		}
		return os.Getenv(name)
	}, "DATABASE_URL")
	if err != nil {
		return cfg, nil, nil, err
	}
	cfg.TicketSeed = roles.DevTicketSeed()
	name := "boxoffice_bench_" + randomHex(4)
	url, err := roles.EnsureDatabase(ctx, cfg.DatabaseURL, name)
	if err != nil {
		return cfg, nil, nil, err
	}
	drop := func() { dropDatabase(context.WithoutCancel(ctx), cfg.DatabaseURL, name) }
	if err := migrations.Up(ctx, url); err != nil {
		drop()
		return cfg, nil, nil, err
	}
	pc := db.PoolConfig{URL: url, MaxConns: cfg.DBMaxConns}
	if len(tracer) > 0 {
		pc.Tracer = tracer[0]
	}
	pool, err := db.NewPool(ctx, pc)
	if err != nil {
		drop()
		return cfg, nil, nil, err
	}
	return cfg, pool, func() { pool.Close(); drop() }, nil
}
