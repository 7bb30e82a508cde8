package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"

	"golang.org/x/sync/errgroup"

	"boxoffice/db"
	"boxoffice/handlers"
	"boxoffice/relay"
)

// runRelay runs `boxoffice relay`: the only publisher of domain events,
// plus /healthz, /readyz and /metrics on OPS_ADDR. Run several for
// availability; their leases keep them from publishing the same row at once.
func runRelay(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("relay", flag.ExitOnError)
	_ = fs.Parse(args)
	cfg, err := loadConfig(os.Getenv, "DATABASE_URL", "NATS_URL")
	if err != nil {
		return err
	}
	logger := newLogger(cfg.LogLevel)
	pool, err := db.NewPool(ctx, db.PoolConfig{URL: cfg.DatabaseURL, MaxConns: cfg.DBMaxConns})
	if err != nil {
		return err
	}
	defer pool.Close()
	nc, _, err := connectBus(ctx, cfg, "relay", logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	reg := newRegistry()
	r, err := relay.New(pool, nc, relay.Config{Logger: logger, Registerer: reg})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.OpsAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.OpsAddr, err)
	}
	checks := []handlers.Check{{Name: "database", Func: pool.Ping, Required: true}, {Name: "nats", Func: natsCheck(nc), Required: true}}
	logger.InfoContext(ctx, "relay running", "relay_id", r.ID(), "ops_addr", ln.Addr().String())
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveHTTP(gctx, ln, opsHandler(reg, checks), logger) })
	g.Go(func() error { return r.Run(gctx) })
	return g.Wait()
}
