package roles

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"boxoffice/handlers"
	"boxoffice/platform/db"
)

// busRole is what the roles that work off the bus (relay, work) share:
// configuration, the pool, a provisioned bus connection and a registry.
type busRole struct {
	cfg    Config
	logger *slog.Logger
	pool   *pgxpool.Pool
	nc     *nats.Conn
	js     jetstream.JetStream
	reg    *prometheus.Registry
	// stopTracing flushes the process's spans (a no-op with tracing off).
	stopTracing func()
}

// openBusRole reads the configuration through getenv (DATABASE_URL and
// NATS_URL are required) and checks it with each of needs, then opens the
// pool and the bus, and provisions the streams.
func openBusRole(ctx context.Context, name string, getenv func(string) string, needs ...func(Config) error) (*busRole, error) {
	cfg, err := LoadConfig(getenv, "DATABASE_URL", "NATS_URL")
	if err != nil {
		return nil, err
	}
	for _, need := range needs {
		if err := need(cfg); err != nil {
			return nil, err
		}
	}
	r := &busRole{cfg: cfg, logger: cfg.logger()}
	if r.stopTracing, err = StartTracing(ctx, getenv, name, cfg, r.logger); err != nil {
		return nil, err
	}
	if r.pool, err = db.NewPool(ctx, cfg.PoolConfig(cfg.DatabaseURL)); err != nil {
		r.stopTracing()
		return nil, err
	}
	db.CheckConnectionBudget(ctx, r.pool, r.logger)
	r.reg = NewRegistry(r.pool)
	if r.nc, r.js, err = ConnectBus(ctx, cfg, name, r.logger); err != nil {
		r.pool.Close()
		r.stopTracing()
		return nil, err
	}
	return r, nil
}

// Close closes the bus connection, then the pool, and flushes the spans.
func (r *busRole) Close() {
	r.nc.Close()
	r.pool.Close()
	r.stopTracing()
}

// run serves /healthz, /readyz and /metrics on OPS_ADDR and runs each
// component until ctx is done or one of them fails. /readyz names the
// payment provider when payments is not "" (work).
func (r *busRole) run(ctx context.Context, payments string, components ...func(context.Context) error) error {
	ln, err := net.Listen("tcp", r.cfg.OpsAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", r.cfg.OpsAddr, err)
	}
	checks := []handlers.Check{
		{Name: "database", Func: r.pool.Ping, Required: true},
		{Name: "nats", Func: natsCheck(r.nc), Required: true},
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ServeHTTP(gctx, ln, opsHandler(r.reg, checks, payments), r.logger) })
	for _, run := range components {
		g.Go(func() error { return run(gctx) })
	}
	r.logger.InfoContext(ctx, "running", "components", len(components), "ops_addr", ln.Addr().String())
	return g.Wait()
}
