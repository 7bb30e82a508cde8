package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"boxoffice/admission"
	"boxoffice/auth"
	"boxoffice/bus"
	"boxoffice/catalog"
	"boxoffice/db"
	"boxoffice/handlers"
	"boxoffice/migrations"
	"boxoffice/payments"
	"boxoffice/purchase"
	"boxoffice/waitingroom"
	"boxoffice/webhooks"
)

func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	_ = fs.Parse(args)
	cfg, err := loadConfig(os.Getenv, "DATABASE_URL", "BOXOFFICE_JWT_SECRET", "BOXOFFICE_ADMISSION_KEY")
	if err != nil {
		return err
	}
	logger := newLogger(cfg.LogLevel)
	pool, err := db.NewPool(ctx, db.PoolConfig{URL: cfg.DatabaseURL, MaxConns: cfg.DBMaxConns, RegionEpoch: cfg.RegionEpoch})
	if err != nil {
		return err
	}
	defer pool.Close()
	reg := newRegistry(pool)
	checks := []handlers.Check{{Name: "database", Func: pool.Ping, Required: true}}
	var wopts waitingRoomOpts
	if cfg.NATSURL != "" {
		// The API never publishes (the relay does); NATS is only reported,
		// and read for the release controller's consumer backlog.
		nc, js, err := bus.Connect(cfg.NATSURL, "boxoffice-serve", logger)
		if err != nil {
			return err
		}
		defer nc.Close()
		checks = append(checks, handlers.Check{Name: "nats", Func: natsCheck(nc)})
		wopts.pending = consumerPending(js)
	}
	wr, err := newWaitingRoom(ctx, cfg, pool, logger, reg, wopts)
	if err != nil {
		return err
	}
	defer wr.close()
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	logger.InfoContext(ctx, "serving", "addr", ln.Addr().String())
	// The Stripe ingress re-reads intents from the provider when a webhook
	// disagrees with an order, so receiving webhooks needs the provider.
	var provider payments.Provider
	var sandbox *payments.Sandbox
	if cfg.StripeWebhookSecret != "" {
		if provider, sandbox, err = newProvider(cfg, pool, logger); err != nil {
			return err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return serveHTTP(gctx, ln, newHandlersWithRoom(cfg, pool, logger, reg, checks, provider, sandbox, wr.room).Handler(), logger)
	})
	g.Go(func() error { return wr.run(gctx) })
	return g.Wait()
}

// newHandlers wires the API's dependencies; serve, dev and bench share it.
// reg, when not nil, receives the API's metrics and is served at /metrics;
// provider is what the Stripe ingress consults when a webhook disagrees
// with an order; sandbox, when not nil, adds the sandbox's buyer actions.
func newHandlers(cfg config, pool *pgxpool.Pool, logger *slog.Logger, reg *prometheus.Registry, checks []handlers.Check, provider payments.Provider, sandbox *payments.Sandbox) *handlers.Handlers {
	return newHandlersWithRoom(cfg, pool, logger, reg, checks, provider, sandbox, nil)
}

// newHandlersWithRoom is newHandlers with the waiting room; nil gives the
// handlers' default: in-process, at a fixed rate, with no admitter running
// (enough for bench holds, which admits a few buyers at once).
func newHandlersWithRoom(cfg config, pool *pgxpool.Pool, logger *slog.Logger, reg *prometheus.Registry, checks []handlers.Check, provider payments.Provider, sandbox *payments.Sandbox, room *waitingroom.Room) *handlers.Handlers {
	hc := handlers.Config{
		Cell:      cfg.Cell,
		Logger:    logger,
		Bearer:    auth.NewVerifier(cfg.JWTSecret),
		Admission: admission.NewSigner(admission.SignerConfig{Key: cfg.AdmissionKey}),
		Catalog:   catalog.New(pool),
		Purchase:  purchase.NewService(pool, logger, purchase.Config{HoldTTL: cfg.HoldTTL}),
		Checks:    checks,
		Sandbox:   sandbox,
	}
	hc.Webhooks = webhooks.NewService(pool, webhooks.ServiceConfig{
		Guard: &webhooks.Guard{AllowPrivate: cfg.Webhooks.AllowPrivate}, Logger: logger,
	})
	hc.WaitingRoom = room
	if cfg.TicketSeed != nil {
		hc.TicketPublicKey = ed25519.NewKeyFromSeed(cfg.TicketSeed).Public().(ed25519.PublicKey)
	}
	if cfg.StripeWebhookSecret != "" {
		ic := payments.IngressConfig{WebhookSecret: cfg.StripeWebhookSecret, Logger: logger, Provider: provider}
		if reg != nil {
			ic.Registerer = reg
		}
		hc.StripeIngress = payments.NewIngress(pool, ic)
	}
	if reg != nil {
		hc.Registerer = reg
		hc.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	}
	return handlers.New(hc)
}

// serveHTTP serves h on ln until ctx is done, then stops taking requests and
// lets in-flight ones finish for up to 10 seconds.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down http: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve http: %w", err)
	}
	return nil
}

func runMigrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ExitOnError)
	_ = fs.Parse(args)
	cfg, err := loadConfig(os.Getenv, "DATABASE_URL")
	if err != nil {
		return err
	}
	if err := migrations.Up(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "boxoffice: migrations applied")
	return nil
}
