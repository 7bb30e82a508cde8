package roles

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"boxoffice/handlers"
	"boxoffice/migrations"
	"boxoffice/platform/bus"
)

// startAPI starts what an API process (serve, dev) needs before it opens
// anything: cfg's logger, tracing as role, and the bearer token verifier
// (openBearer). stop ends the tracing; on an error nothing is left
// running.
func startAPI(ctx context.Context, getenv func(string) string, role string, cfg *Config) (logger *slog.Logger, stop func(), err error) {
	logger = cfg.logger()
	stop, err = StartTracing(ctx, getenv, role, *cfg, logger)
	if err != nil {
		return nil, nil, err
	}
	if err := openBearer(ctx, cfg, logger); err != nil {
		stop()
		return nil, nil, err
	}
	return logger, stop, nil
}

// runServe runs `boxoffice serve`, reading the environment through getenv.
func runServe(ctx context.Context, args []string, getenv func(string) string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	var required []string
	if getenv("BOXOFFICE_CELLS") == "" {
		required = append(required, "DATABASE_URL")
	}
	cfg, err := LoadConfig(getenv, required...)
	if err != nil {
		return err
	}
	if err := cfg.serveNeeds(); err != nil {
		return err
	}
	// Checked whether or not this process receives the provider's
	// webhooks: an API with no provider named would be one whose buyers
	// pay nobody, or themselves.
	if err := cfg.paymentsNeeds(); err != nil {
		return err
	}
	if cfg.Webhooks.SecretKeys == nil {
		return errNoWebhookKeys
	}
	logger, stopTracing, err := startAPI(ctx, getenv, "serve", &cfg)
	if err != nil {
		return err
	}
	defer stopTracing()
	reg := prometheus.NewRegistry()
	reg.MustRegister(processCollectors()...)
	announcePayments(ctx, cfg, logger, reg)
	var checks []handlers.Check
	var js jetstream.JetStream
	if cfg.NATSURL != "" {
		// The API never publishes (the relay does); NATS is only reported,
		// and read for the release controllers' consumer backlogs.
		nc, j, err := bus.Connect(cfg.NATSURL, "boxoffice-serve", logger, cfg.natsOptions()...)
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
	checks = append(served.checks, checks...)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return ServeHTTP(gctx, ln, NewAPI(cfg, served.router, logger, reg, checks).Handler(), logger)
	})
	g.Go(func() error { return ServeHTTP(gctx, opsLn, opsHandler(reg, checks, cfg.Payments), logger) })
	for _, run := range served.runs {
		g.Go(func() error { return run(gctx) })
	}
	return g.Wait()
}

// ServeHTTP serves h on ln until ctx is done, then stops taking requests and
// lets in-flight ones finish for up to 10 seconds.
func ServeHTTP(ctx context.Context, ln net.Listener, h http.Handler, logger *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		MaxHeaderBytes:    handlers.MaxHeaderBytes,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return serveUntilDone(ctx, srv, handlers.ProblemListener(ln), "http", 10*time.Second)
}

// serveUntilDone serves srv on ln until ctx is done, then stops taking
// requests and lets in-flight ones finish for up to grace. It returns the
// error that stopped serving before ctx was done, or that of the shutdown;
// what names the server in them.
func serveUntilDone(ctx context.Context, srv *http.Server, ln net.Listener, what string, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", what, err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down %s: %w", what, err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", what, err)
	}
	return nil
}

func runMigrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := LoadConfig(os.Getenv, "DATABASE_URL")
	if err != nil {
		return err
	}
	if err := migrations.Up(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "boxoffice: migrations applied")
	return nil
}
