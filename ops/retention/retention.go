// Package retention keeps the tables that grow with every purchase
// bounded (issue 18): it deletes, in batches of at most Batch rows per
// statement so that no statement holds locks for long,
//
//   - inbox rows older than Config.Inbox. The inbox is what makes a
//     redelivered or replayed event a no-op, so its retention must outlast
//     every way an event can come back: the stream's replay horizon
//     (bus.Config.MaxAge, 7 days) and the dead letters a replay may take
//     from (bus.Config.DLQMaxAge, 30 days). New refuses a shorter one.
//   - outbox_history rows of events that occurred before the same
//     Config.Inbox: an order's timeline (docs/timeline.md) is as long as
//     the inbox keeps the consumers that applied its events.
//   - Stripe event ids older than Config.StripeEvents. Stripe retries a
//     webhook for up to 3 days; New refuses a retention shorter than that.
//   - idempotency keys past their expires_at (24 hours after the hold):
//     a request with the key after that is a new request.
//   - the same of the other creating requests' keys (idempotent_requests,
//     package idempotency), with the answers kept for their retries.
//
// and clears the PaymentIntent client secret of every order that no
// longer awaits payment: nobody may confirm it any more.
//
// Run does a pass every Config.Interval; any number of workers may run it
// (each statement picks its own rows).
package retention

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/domain/payments/record"
	"boxoffice/domain/purchase"
	"boxoffice/platform/db"
	"boxoffice/platform/promreg"
	"boxoffice/sqlcgen"
)

// Batch is the most rows one statement deletes or changes.
const Batch = 1000

// Defaults of the retentions (and of BOXOFFICE_INBOX_RETENTION and
// BOXOFFICE_STRIPE_EVENT_RETENTION).
const (
	DefaultInbox        = 35 * 24 * time.Hour
	DefaultStripeEvents = 30 * 24 * time.Hour
)

// Floors of the retentions: see the package documentation.
const (
	MinInbox        = 31 * 24 * time.Hour
	MinStripeEvents = 3 * 24 * time.Hour
)

// Config configures New. Zero values stand for the defaults.
type Config struct {
	// Inbox is how long inbox rows are kept: at least MinInbox, default
	// 35 days.
	Inbox time.Duration
	// StripeEvents is how long Stripe event ids are kept: at least
	// MinStripeEvents, default 30 days.
	StripeEvents time.Duration
	// Interval is the pause between passes. Defaults to 1 minute.
	Interval time.Duration
	// Logger receives a line per pass that removed something. Defaults to
	// discarding.
	Logger *slog.Logger
	// Registerer receives boxoffice_retention_rows_total{table}. Defaults
	// to none.
	Registerer prometheus.Registerer
}

// Pruner keeps the tables bounded.
type Pruner struct {
	pool   *pgxpool.Pool
	cfg    Config
	logger *slog.Logger
	rows   *prometheus.CounterVec
}

// New returns the pruner of pool's database, or an error for a retention
// shorter than the window that depends on it.
func New(pool *pgxpool.Pool, cfg Config) (*Pruner, error) {
	cfg.Inbox = cmp.Or(cfg.Inbox, DefaultInbox)
	cfg.StripeEvents = cmp.Or(cfg.StripeEvents, DefaultStripeEvents)
	cfg.Interval = cmp.Or(cfg.Interval, time.Minute)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	switch {
	case cfg.Inbox < MinInbox:
		return nil, fmt.Errorf("retention: inbox retention %s is shorter than the dead letters' %s plus a day", cfg.Inbox, MinInbox-24*time.Hour)
	case cfg.StripeEvents < MinStripeEvents:
		return nil, fmt.Errorf("retention: Stripe event retention %s is shorter than Stripe's %s of retries", cfg.StripeEvents, MinStripeEvents)
	}
	return &Pruner{pool: pool, cfg: cfg, logger: cfg.Logger.With("component", "retention"),
		rows: promreg.CounterVec(cfg.Registerer, "boxoffice_retention_rows_total",
			"Rows the retention worker deleted (client_secrets: secrets cleared), by table.", "table")}, nil
}

// Pass removes what is past its retention as of now, batch after batch
// until a batch comes back short, and returns the rows per table.
func (p *Pruner) Pass(ctx context.Context, now time.Time) (map[string]int64, error) {
	q, tx := sqlcgen.New(), db.Interpreting(p.pool)
	var awaiting []string
	for _, st := range purchase.OrderStatuses {
		if st.AwaitsPayment() {
			awaiting = append(awaiting, string(st))
		}
	}
	steps := []struct {
		table string
		run   func() (int64, error)
	}{
		{"inbox", func() (int64, error) {
			return q.RetentionPruneInbox(ctx, tx, sqlcgen.RetentionPruneInboxParams{Before: now.Add(-p.cfg.Inbox), MaxRows: Batch})
		}},
		{"outbox_history", func() (int64, error) {
			return q.RetentionPruneOutboxHistory(ctx, tx, sqlcgen.RetentionPruneOutboxHistoryParams{Before: now.Add(-p.cfg.Inbox), MaxRows: Batch})
		}},
		{"stripe_events", func() (int64, error) {
			return q.RetentionPruneStripeEvents(ctx, tx, sqlcgen.RetentionPruneStripeEventsParams{Before: now.Add(-p.cfg.StripeEvents), MaxRows: Batch})
		}},
		{"idempotency_keys", func() (int64, error) { return q.RetentionPruneIdempotencyKeys(ctx, tx, Batch) }},
		{"idempotent_requests", func() (int64, error) { return q.RetentionPruneIdempotentRequests(ctx, tx, Batch) }},
		{"client_secrets", func() (int64, error) {
			return record.ClearSecrets(ctx, tx, awaiting, Batch)
		}},
	}
	out := make(map[string]int64, len(steps))
	var errs []error
	for _, s := range steps {
		for {
			n, err := s.run()
			if err != nil {
				errs = append(errs, fmt.Errorf("retention %s: %w", s.table, err))
				break
			}
			out[s.table] += n
			p.rows.WithLabelValues(s.table).Add(float64(n))
			if n < Batch || ctx.Err() != nil {
				break
			}
		}
	}
	return out, errors.Join(errs...)
}

// Run does a pass every Interval until ctx is done, then returns nil.
func (p *Pruner) Run(ctx context.Context) error {
	for {
		got, err := p.Pass(ctx, time.Now())
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			p.logger.ErrorContext(ctx, "retention pass", "error", err.Error())
		default:
			var total int64
			for _, n := range got {
				total += n
			}
			if total > 0 {
				p.logger.InfoContext(ctx, "retention pass", "inbox", got["inbox"], "stripe_events", got["stripe_events"],
					"idempotency_keys", got["idempotency_keys"], "idempotent_requests", got["idempotent_requests"],
					"client_secrets", got["client_secrets"])
			}
		}
		t := time.NewTimer(p.cfg.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}
