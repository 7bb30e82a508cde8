package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/consumers"
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
	var names []string
	if *only != "" {
		names = strings.Split(*only, ",")
	}
	role, err := openBusRole(ctx, "work")
	if err != nil {
		return err
	}
	defer role.Close()
	running, err := startConsumers(role.pool, role.js, role.logger, role.reg, names)
	if err != nil {
		return err
	}
	runs := make([]func(context.Context) error, len(running))
	for i, c := range running {
		runs[i] = c.Run
	}
	return role.run(ctx, runs...)
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
