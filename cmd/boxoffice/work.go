package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"boxoffice/consumers"
	"boxoffice/db"
	"boxoffice/handlers"
)

// worker is one durable consumer `boxoffice work` can run.
type worker struct {
	name string
	cfg  consumers.Config
	h    consumers.HandlerFunc
}

// workers lists every durable consumer of the product. The purchase saga,
// payments, tickets and webhooks register here as they are built.
func workers() []worker {
	return nil
}

// runWork runs `boxoffice work [-only a,b]`: the durable consumers, plus
// /healthz, /readyz and /metrics on OPS_ADDR.
func runWork(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("work", flag.ExitOnError)
	only := fs.String("only", "", "comma-separated consumers to run (default: all)")
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
	nc, js, err := connectBus(ctx, cfg, "work", logger)
	if err != nil {
		return err
	}
	defer nc.Close()
	reg := newRegistry()
	var names []string
	if *only != "" {
		names = strings.Split(*only, ",")
	}
	running, err := startConsumers(pool, js, logger, reg, names)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.OpsAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.OpsAddr, err)
	}
	checks := []handlers.Check{{Name: "database", Func: pool.Ping, Required: true}, {Name: "nats", Func: natsCheck(nc), Required: true}}
	logger.InfoContext(ctx, "workers running", "consumers", len(running), "ops_addr", ln.Addr().String())
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveHTTP(gctx, ln, opsHandler(reg, checks), logger) })
	for _, c := range running {
		g.Go(func() error { return c.Run(gctx) })
	}
	return g.Wait()
}

// startConsumers builds the named consumers (all when names is empty).
func startConsumers(pool *pgxpool.Pool, js jetstream.JetStream, logger *slog.Logger, reg prometheus.Registerer, names []string) ([]*consumers.Consumer, error) {
	known := workers()
	for _, n := range names {
		if !slices.ContainsFunc(known, func(w worker) bool { return w.name == n }) {
			return nil, fmt.Errorf("-only: unknown consumer %q", n)
		}
	}
	var out []*consumers.Consumer
	for _, w := range known {
		if len(names) > 0 && !slices.Contains(names, w.name) {
			continue
		}
		cfg := w.cfg
		cfg.Name, cfg.Logger, cfg.Registerer = w.name, logger, reg
		c, err := consumers.New(pool, js, cfg, w.h)
		if err != nil {
			return nil, fmt.Errorf("consumer %s: %w", w.name, err)
		}
		out = append(out, c)
	}
	return out, nil
}
