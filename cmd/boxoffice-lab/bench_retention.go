package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"boxoffice/cmd/boxoffice/roles"
	"boxoffice/lab/bench"
	"boxoffice/ops/retention"
)

// retentionTables are the tables every purchase adds to that must stay
// bounded (issue 18), and what bounds each: the retention pass (inbox,
// Stripe event ids, idempotency keys, client secrets), the relay (outbox
// rows once published, leases once settled or expired).
var retentionTables = []struct{ name, count string }{
	{"inbox", "SELECT count(*) FROM inbox"},
	{"stripe_events", "SELECT count(*) FROM stripe_events"},
	{"idempotency_keys", "SELECT count(*) FROM idempotency_keys"},
	{"client secrets", "SELECT count(*) FROM payments WHERE client_secret IS NOT NULL"},
	{"outbox", "SELECT count(*) FROM outbox"},
	{"outbox_leases", "SELECT count(*) FROM outbox_leases"},
}

// runBenchRetention shows that those tables stay flat over a long run of
// purchases. Every role runs in this process, as for `bench purchases`;
// each simulated day is -day of real purchases, after which the
// production retention pass runs with its production windows (35 days of
// inbox, 30 of Stripe event ids) as of that day's end: the pass takes its
// clock as an argument. The day's new inbox rows and Stripe event ids are
// dated that simulated day (one update of each new row, as the day ends),
// older rows are left alone. Idempotency keys expire by the database's
// clock (24 hours after their hold), so theirs is moved back a day each
// night instead. Row counts grow for as long as the windows and are flat
// after; the orders, the business's own record, grow for ever.
func runBenchRetention(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench retention", flag.ContinueOnError)
	days := fs.Int("days", 45, "simulated days (more than the longest retention, 35)")
	day := fs.Duration("day", 2*time.Second, "real time of purchases in each simulated day")
	concurrency := fs.Int("concurrency", 16, "buyers purchasing at once")
	if err := roles.ParseFlags(fs, args); err != nil {
		return err
	}
	cfg, pool, cleanup, err := benchSetup(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	cfg.WaitingRoomIPLimit, cfg.EventReadIPLimit = -1, -1
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	nc, js, stopBus, err := benchBus(ctx, &cfg, logger)
	if err != nil {
		return err
	}
	defer stopBus()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	cfg.SandboxWebhookURL = base + "/v1/webhooks/stripe"
	stackCtx, stopStack := context.WithCancel(ctx)
	stack := make(chan error, 1)
	go func() { stack <- roles.RunStack(stackCtx, cfg, pool, nc, js, ln, nil, logger, roles.NewRegistry(pool)) }()
	defer func() { stopStack(); <-stack }() //nolint:errcheck // the stack's error is its shutdown's, past the measurement
	pruner, err := retention.New(pool, retention.Config{Inbox: cfg.InboxRetention, StripeEvents: cfg.StripeEventRetention})
	if err != nil {
		return err
	}
	client := bench.NewClient(base, cfg.JWTSecret, *concurrency*2)

	fmt.Printf("boxoffice-lab bench retention — %d simulated days of %s of purchases (%d buyers at once); retention: inbox %s, Stripe event ids %s\n\n",
		*days, *day, *concurrency, cfg.InboxRetention, cfg.StripeEventRetention)
	fmt.Printf("%4s %9s %8s", "day", "ticketed", "orders")
	for _, t := range retentionTables {
		fmt.Printf(" %16s", t.name)
	}
	fmt.Printf(" %12s %14s\n", "inbox MB", "stripe_ev. MB")
	var orders int64
	start := time.Now()
	for d := 1; d <= *days; d++ {
		ev, err := client.CreateEvent(ctx, 10, 500)
		if err != nil {
			return err
		}
		res, err := client.RunPurchases(ctx, ev, bench.PurchaseRun{Concurrency: *concurrency, Duration: *day})
		if err != nil {
			return err
		}
		// The end of day d.
		simulated := start.Add(time.Duration(d) * 24 * time.Hour)
		for _, stmt := range []string{
			// Rows still on the real clock (earlier than any simulated
			// day) are this day's.
			"UPDATE inbox SET processed_at = $1 WHERE processed_at < $2",
			"UPDATE stripe_events SET received_at = $1 WHERE received_at < $2",
		} {
			if _, err := pool.Exec(ctx, stmt, simulated, start.Add(12*time.Hour)); err != nil {
				return fmt.Errorf("date the day's rows: %w", err)
			}
		}
		if _, err := pool.Exec(ctx, "UPDATE idempotency_keys SET expires_at = expires_at - interval '1 day'"); err != nil {
			return fmt.Errorf("age the idempotency keys: %w", err)
		}
		if _, err := pruner.Pass(ctx, simulated.Add(time.Minute)); err != nil {
			return err
		}
		// A day is long enough for autovacuum to make the deleted rows'
		// space reusable; the simulated one is seconds, so vacuum here.
		if _, err := pool.Exec(ctx, "VACUUM inbox, stripe_events, idempotency_keys"); err != nil {
			return fmt.Errorf("vacuum: %w", err)
		}
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&orders); err != nil {
			return err
		}
		fmt.Printf("%4d %9d %8d", d, res.Ticketed, orders)
		for _, t := range retentionTables {
			var n int64
			if err := pool.QueryRow(ctx, t.count).Scan(&n); err != nil {
				return fmt.Errorf("count %s: %w", t.name, err)
			}
			fmt.Printf(" %16d", n)
		}
		var inboxBytes, eventBytes int64
		if err := pool.QueryRow(ctx, "SELECT pg_total_relation_size('inbox'), pg_total_relation_size('stripe_events')").Scan(&inboxBytes, &eventBytes); err != nil {
			return err
		}
		fmt.Printf(" %12.1f %14.1f\n", float64(inboxBytes)/(1<<20), float64(eventBytes)/(1<<20))
	}
	return nil
}
