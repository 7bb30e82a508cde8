package roles

import (
	"cmp"
	"context"

	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"boxoffice/domain/catalog"
	"boxoffice/domain/cells"
	"boxoffice/handlers"
	"boxoffice/migrations"
	"boxoffice/platform/auth"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
	"boxoffice/platform/pgcluster"
	"boxoffice/relay"
)

// Development-only secrets, used when the environment sets none. They are
// public by design and must never be used in production.
const (
	DevJWTSecret    = "boxoffice-dev-jwt-secret-not-for-production"
	DevAdmissionKey = "boxoffice-dev-admission-key-not-for-production"
	DevWebhookKey   = "whsec_boxoffice_dev_not_for_production"
	// DevWebhookSecretKeys seals organizers' endpoint secrets in dev
	// (BOXOFFICE_WEBHOOK_SECRET_KEYS): the SHA-256 of a public phrase.
	DevWebhookSecretKeys = "dev:fWc7KXgq9FfX0wYc4Cu63uLCSD0LREvAYn2acHPLrx8="
)

// The demo organizer owns the seeded event, so a second `dev` finds it.
var demoOrganizer = uuid.MustParse("d0000000-0000-4000-8000-000000000001")

// runDev runs `boxoffice dev`, reading the environment through env and
// printing what a developer needs to out.
func runDev(ctx context.Context, args []string, env func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	dir := fs.String("dir", ".boxoffice", "state directory (private PostgreSQL data)")
	if err := ParseFlags(fs, args); err != nil {
		return err
	}

	cfg, err := LoadDevConfig(devEnv(env))
	if err != nil {
		return err
	}
	logger, stopTracing, err := startAPI(ctx, env, "dev", &cfg)
	if err != nil {
		return err
	}
	defer stopTracing()

	if cfg.DatabaseURL == "" {
		url, stopPG, err := devDatabase(ctx, *dir, logger, out)
		if err != nil {
			return err
		}
		defer stopPG()
		cfg.DatabaseURL = url
	}
	if err := migrations.Up(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	pool, err := db.NewPool(ctx, cfg.PoolConfig(cfg.DatabaseURL))
	if err != nil {
		return err
	}
	defer pool.Close()
	event, err := seedDemo(ctx, pool, cfg.Cell)
	if err != nil {
		return err
	}

	natsNote := ""
	if cfg.NATSURL == "" {
		storeDir, err := filepath.Abs(filepath.Join(*dir, "nats"))
		if err != nil {
			return err
		}
		ns, err := bus.StartEmbedded(bus.EmbeddedConfig{StoreDir: storeDir})
		if err != nil {
			return err
		}
		defer func() {
			// Wait for the server's own goroutines too: until then its
			// store is still being written, and dev's directory with it.
			ns.Shutdown()
			ns.WaitForShutdown()
		}()
		cfg.NATSURL = ns.ClientURL()
		natsNote = " (embedded; inspect with: nats --server " + cfg.NATSURL + " stream ls)"
	}
	nc, js, err := ConnectBus(ctx, cfg, "dev", logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	reg := NewRegistry(pool)

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	opsLn, err := net.Listen("tcp", cfg.OpsAddr)
	if err != nil && env("OPS_ADDR") == "" {
		// 9090 is often taken on a developer's machine (a Prometheus of
		// their own): the ops listener is not worth failing dev for, and
		// dev prints where it is.
		opsLn, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		ln.Close()
		return fmt.Errorf("listen on %s: %w", cfg.OpsAddr, err)
	}
	buyer, err := auth.Mint(cfg.JWTSecret, auth.Identity{UserID: uuid.New(), Role: auth.RoleBuyer}, 24*time.Hour)
	if err != nil {
		return err
	}
	organizer, err := auth.Mint(cfg.JWTSecret, auth.Identity{UserID: uuid.New(), Role: auth.RoleOrganizer, OrganizerID: demoOrganizer}, 24*time.Hour)
	if err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	if cfg.TicketSeed == nil {
		cfg.TicketSeed = DevTicketSeed()
	}
	if env("BOXOFFICE_SANDBOX_WEBHOOK_URL") == "" {
		cfg.SandboxWebhookURL = base + "/v1/webhooks/stripe"
	}
	fmt.Fprintf(out, `
Boxoffice is running (development mode; dev secrets are public, never use them in production).

  API            %[1]s
  Docs           %[1]s/docs
  OpenAPI        %[1]s/openapi.yaml
  Metrics        %[10]s/metrics
  PostgreSQL     %[2]s
  NATS           %[7]s%[8]s
  Demo event     %[3]s (%[4]d seats)
  Payments       %[9]s

  Buyer token      %[5]s
  Organizer token  %[6]s

Try it:
  export BUYER=%[5]s
  curl -s -X POST -H "Authorization: Bearer $BUYER" %[1]s/v1/events/%[3]s/waiting-room

Stop with Ctrl-C.
`, base, RedactURL(cfg.DatabaseURL), event.ID, event.SeatCount, buyer, organizer, cfg.NATSURL, natsNote, paymentsNote(cfg), "http://"+opsLn.Addr().String())

	return RunStack(ctx, cfg, pool, nc, js, ln, opsLn, logger, reg)
}

// devEnv is env with dev's defaults: the public development secrets, the
// sandbox (unless a Stripe key is given: no other role runs the sandbox
// without being told to), loopback addresses and private webhook
// endpoints. A variable whose <VAR>_FILE is set gets no default: the file
// gives it.
func devEnv(env func(string) string) func(string) string {
	payments := "sandbox"
	if env("STRIPE_SECRET_KEY") != "" || env("STRIPE_SECRET_KEY_FILE") != "" {
		payments = "stripe"
	}
	defaults := devDefaults()
	defaults["BOXOFFICE_PAYMENTS"] = payments
	return func(name string) string {
		if env(name+"_FILE") != "" {
			return env(name)
		}
		return cmp.Or(env(name), defaults[name])
	}
}

// RunStack runs every role in this process — the API on ln, the relay,
// every worker, and /metrics, /healthz and /readyz on ops when it is not
// nil — until ctx is done: what dev and `bench purchases` run.
func RunStack(ctx context.Context, cfg Config, pool *pgxpool.Pool, nc *nats.Conn, js jetstream.JetStream, ln, ops net.Listener, logger *slog.Logger, reg *prometheus.Registry) error {
	r, err := relay.New(pool, nc, relay.Config{Logger: logger, Registerer: reg, Bus: bus.ForCell(cfg.Cell)})
	if err != nil {
		return err
	}
	// One provider for the API and the workers: with the sandbox, the API's
	// buyer actions wake the same webhook sender that delivers them.
	provider, sandbox, err := newProvider(cfg, pool, logger)
	if err != nil {
		return err
	}
	deps := CellDeps{
		Name: cfg.Cell, Pool: pool, Logger: logger, Reg: reg, Provider: provider, Sandbox: sandbox, JS: js, Room: &WaitingRoomOpts{},
	}
	announcePayments(ctx, cfg, logger, reg)
	runs, err := startWorkers(cfg, deps, nil)
	if err != nil {
		return err
	}
	checks := []handlers.Check{{Name: "database", Func: pool.Ping, Required: true}, {Name: "nats", Func: natsCheck(nc)}}
	c, err := BuildCell(ctx, cfg, deps)
	if err != nil {
		return err
	}
	defer c.Close()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return ServeHTTP(gctx, ln, NewAPI(cfg, cells.Single(c.Cell), logger, reg, checks).Handler(), logger)
	})
	if ops != nil {
		g.Go(func() error { return ServeHTTP(gctx, ops, opsHandler(reg, checks, cfg.Payments), logger) })
	}
	for _, run := range c.Runs {
		g.Go(func() error { return run(gctx) })
	}
	g.Go(func() error { return r.Run(db.WithRole(gctx, "relay")) })
	for _, run := range runs {
		g.Go(func() error { return run(gctx) })
	}
	return g.Wait()
}

// devDatabase finds a PostgreSQL for dev: the server on localhost:5432 when
// one answers (database boxoffice, created if missing), else a private
// cluster started from the local PostgreSQL binaries under dir.
func devDatabase(ctx context.Context, dir string, logger *slog.Logger, out io.Writer) (string, func(), error) {
	conn, err := net.DialTimeout("tcp", "127.0.0.1:5432", time.Second)
	if err == nil {
		conn.Close()
		url, err := EnsureDatabase(ctx, "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "boxoffice")
		if err != nil {
			return "", nil, fmt.Errorf("a server answers on localhost:5432 but %w; set DATABASE_URL", err)
		}
		return url, func() {}, nil
	}
	abs, err := filepath.Abs(filepath.Join(dir, "postgres"))
	if err != nil {
		return "", nil, err
	}
	fmt.Fprintf(out, "No PostgreSQL on localhost:5432: starting a private cluster in %s\n", abs)
	cluster, err := pgcluster.Start(ctx, pgcluster.Config{Dir: abs, Logger: logger})
	if err != nil {
		return "", nil, err
	}
	stop := func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := cluster.Stop(stopCtx); err != nil {
			logger.Error("stop private postgres", "error", err.Error())
		}
	}
	url, err := EnsureDatabase(ctx, cluster.URL(), "boxoffice")
	if err != nil {
		stop()
		return "", nil, err
	}
	return url, stop, nil
}

// EnsureDatabase creates database name on the server of adminURL if it is
// missing and returns its URL.
func EnsureDatabase(ctx context.Context, adminURL, name string) (string, error) {
	cc, err := pgx.ParseConfig(adminURL)
	if err != nil {
		return "", fmt.Errorf("parse database url: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return "", fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up database %s: %w", name, err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return "", fmt.Errorf("create database %s: %w", name, err)
		}
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cc.User, cc.Host, cc.Port, name), nil
}

// seedDemo creates the demo event — three sections, a few thousand seats —
// unless a previous run did.
func seedDemo(ctx context.Context, pool *pgxpool.Pool, cell string) (catalog.Event, error) {
	c := catalog.New(pool)
	existing, err := c.EventsByOrganizer(ctx, demoOrganizer, nil, 1)
	if err != nil {
		return catalog.Event{}, err
	}
	if len(existing) > 0 {
		return existing[0], nil
	}
	ev, err := c.CreateEvent(ctx, catalog.EventParams{
		OrganizerID: demoOrganizer,
		Name:        "Demo Night — Boxoffice Arena",
		StartsAt:    time.Now().Add(30 * 24 * time.Hour).Truncate(time.Hour).UTC(),
		Currency:    "eur",
		Cell:        cell,
		Sections: []catalog.Section{
			{Name: "Floor", Rows: 20, SeatsPerRow: 50, PriceMinor: 12000},
			{Name: "Lower Bowl", Rows: 30, SeatsPerRow: 60, PriceMinor: 8500},
			{Name: "Balcony", Rows: 25, SeatsPerRow: 40, PriceMinor: 4500},
		},
	})
	if err != nil {
		return catalog.Event{}, fmt.Errorf("seed demo event: %w", err)
	}
	return ev, nil
}

// RedactURL drops any password from a connection URL before printing it.
func RedactURL(raw string) string {
	cc, err := pgx.ParseConfig(raw)
	if err != nil {
		return "(unparseable)"
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database)
}

func paymentsNote(cfg Config) string {
	if cfg.Payments == "sandbox" {
		return "sandbox (confirm a card with POST /v1/sandbox/payment-intents/{id}/authorize)"
	}
	return "stripe"
}
