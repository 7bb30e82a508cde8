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
// each simulated day is -day of real purchases, after which the clock of
// the time-bounded rows is moved back one day (inbox.processed_at,
// stripe_events.received_at, idempotency_keys.expires_at: the only columns
// the retention reads) and the production retention pass runs with its
// production windows (35 days of inbox, 30 of Stripe event ids, keys
// until they expire). Row counts grow for as long as the windows and are
// flat after; the orders, the business's own record, grow for ever.
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
	fmt.Printf(" %12s\n", "inbox MB")
	var orders int64
	for d := 1; d <= *days; d++ {
		ev, err := client.CreateEvent(ctx, 10, 500)
		if err != nil {
			return err
		}
		res, err := client.RunPurchases(ctx, ev, bench.PurchaseRun{Concurrency: *concurrency, Duration: *day})
		if err != nil {
			return err
		}
		// Midnight: the day's rows are a day older.
		for _, stmt := range []string{
			"UPDATE inbox SET processed_at = processed_at - interval '1 day'",
			"UPDATE stripe_events SET received_at = received_at - interval '1 day'",
			"UPDATE idempotency_keys SET expires_at = expires_at - interval '1 day'",
		} {
			if _, err := pool.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("age the rows: %w", err)
			}
		}
		if _, err := pruner.Pass(ctx, time.Now()); err != nil {
			return err
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
		var inboxBytes int64
		if err := pool.QueryRow(ctx, "SELECT pg_total_relation_size('inbox')").Scan(&inboxBytes); err != nil {
			return err
		}
		fmt.Printf(" %12.1f\n", float64(inboxBytes)/(1<<20))
	}
	return nil
}
