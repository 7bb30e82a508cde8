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
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"boxoffice/admission"
	"boxoffice/auth"
	"boxoffice/bus"
	"boxoffice/catalog"
	"boxoffice/cells"
	"boxoffice/handlers"
	"boxoffice/migrations"
	"boxoffice/orderfeed"
	"boxoffice/payments"
	"boxoffice/purchase"
	"boxoffice/waitingroom"
	"boxoffice/webhooks"
)

func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	_ = fs.Parse(args)
	required := []string{"BOXOFFICE_JWT_SECRET", "BOXOFFICE_ADMISSION_KEY"}
	if os.Getenv("BOXOFFICE_CELLS") == "" {
		required = append(required, "DATABASE_URL")
	}
	cfg, err := loadConfig(os.Getenv, required...)
	if err != nil {
		return err
	}
	logger := newLogger(cfg.LogLevel)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var checks []handlers.Check
	var js jetstream.JetStream
	if cfg.NATSURL != "" {
		// The API never publishes (the relay does); NATS is only reported,
		// and read for the release controllers' consumer backlogs.
		nc, j, err := bus.Connect(cfg.NATSURL, "boxoffice-serve", logger)
		if err != nil {
			return err
		}
		defer nc.Close()
		js = j
		checks = append(checks, handlers.Check{Name: "nats", Func: natsCheck(nc)})
	}
	served, err := openCells(ctx, cfg, logger, reg, js)
	if err != nil {
		return err
	}
	defer served.close()
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTPAddr, err)
	}
	// /metrics is for the operator's Prometheus, not for the public: it
	// is served on OPS_ADDR only, beside health checks.
	opsLn, err := net.Listen("tcp", cfg.OpsAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("listen on %s: %w", cfg.OpsAddr, err)
	}
	logger.InfoContext(ctx, "serving", "addr", ln.Addr().String(), "ops_addr", opsLn.Addr().String(), "cells", served.names())
	hc := baseHandlersConfig(cfg, logger, reg, append(served.checks, checks...))
	hc.Cells = served.router
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveHTTP(gctx, ln, handlers.New(hc).Handler(), logger) })
	g.Go(func() error { return serveHTTP(gctx, opsLn, opsHandler(reg, hc.Checks), logger) })
	for _, run := range served.runs {
		g.Go(func() error { return run(gctx) })
	}
	return g.Wait()
}

// newHandlers wires the API's dependencies for one cell on pool; dev and
// bench share it. reg, when not nil, receives the API's metrics; provider is what the Stripe ingress consults when a
// webhook disagrees with an order; sandbox, when not nil, adds the
// sandbox's buyer actions.
func newHandlers(cfg config, pool *pgxpool.Pool, logger *slog.Logger, reg *prometheus.Registry, checks []handlers.Check, provider payments.Provider, sandbox *payments.Sandbox) *handlers.Handlers {
	return newHandlersWithRoom(cfg, pool, logger, reg, checks, provider, sandbox, nil, nil)
}

// newHandlersWithRoom is newHandlers with the waiting room; nil gives the
// handlers' default: in-process, at a fixed rate, with no admitter running
// (enough for bench holds, which admits a few buyers at once). orders,
// when not nil, wakes the order event streams.
func newHandlersWithRoom(cfg config, pool *pgxpool.Pool, logger *slog.Logger, reg *prometheus.Registry, checks []handlers.Check, provider payments.Provider, sandbox *payments.Sandbox, room *waitingroom.Room, orders *orderfeed.Feed) *handlers.Handlers {
	hc := baseHandlersConfig(cfg, logger, reg, checks)
	var ireg prometheus.Registerer
	if reg != nil {
		ireg = reg
	}
	c := newCell(cfg, cfg.Cell, pool, logger, ireg, provider, sandbox)
	if room == nil {
		room = waitingroom.NewRoom(waitingroom.RoomConfig{
			Store: waitingroom.NewMemoryStore(), Signer: hc.Admission, Events: c.Catalog, Logger: logger,
		})
	}
	c.Room, c.Orders = room, orders
	hc.Cells = cells.Single(c)
	return handlers.New(hc)
}

// baseHandlersConfig is the part of the handlers' configuration that does
// not depend on the cells.
func baseHandlersConfig(cfg config, logger *slog.Logger, reg *prometheus.Registry, checks []handlers.Check) handlers.Config {
	hc := handlers.Config{
		Logger:    logger,
		Bearer:    auth.NewVerifier(cfg.JWTSecret),
		Admission: admission.NewSigner(admission.SignerConfig{Key: cfg.AdmissionKey}),
		Checks:    checks,

		HoldsPerSecond:      cfg.HoldRateLimit,
		EventReadsPerSecond: cfg.EventReadIPLimit,
	}
	if cfg.TicketSeed != nil {
		hc.TicketPublicKey = ed25519.NewKeyFromSeed(cfg.TicketSeed).Public().(ed25519.PublicKey)
	}
	if reg != nil {
		hc.Registerer = reg
	}
	return hc
}

// newCell builds the services of one cell on its pool, without its
// waiting room. reg (nil for none) receives the Stripe ingress's metrics.
func newCell(cfg config, name string, pool *pgxpool.Pool, logger *slog.Logger, reg prometheus.Registerer, provider payments.Provider, sandbox *payments.Sandbox) *cells.Cell {
	c := &cells.Cell{
		Name:     name,
		Pool:     pool,
		Catalog:  catalog.New(pool).WithSeatMapCache(time.Second).WithEventCache(time.Minute, 5*time.Second),
		Purchase: purchase.NewService(pool, logger, purchase.Config{HoldTTL: cfg.HoldTTL}),
		Webhooks: webhooks.NewService(pool, webhooks.ServiceConfig{
			Guard: &webhooks.Guard{AllowPrivate: cfg.Webhooks.AllowPrivate}, Logger: logger, MaxEndpoints: cfg.Webhooks.MaxEndpoints,
		}),
		Sandbox: sandbox,
	}
	if cfg.StripeWebhookSecret != "" {
		ic := payments.IngressConfig{WebhookSecret: cfg.StripeWebhookSecret, Logger: logger, Provider: provider}
		if reg != nil {
			ic.Registerer = reg
		}
		c.Ingress = payments.NewIngress(pool, ic)
	}
	return c
}

// serveHTTP serves h on ln until ctx is done, then stops taking requests and
// lets in-flight ones finish for up to 10 seconds.
func serveHTTP(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		MaxHeaderBytes:    handlers.MaxHeaderBytes,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(handlers.ProblemListener(ln)) }()
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
