package purchase

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/platform/backoff"
	"boxoffice/platform/db"
	"boxoffice/platform/promreg"
)

// ExpirerConfig configures NewExpirer. Zero (or negative) values stand for
// their defaults.
type ExpirerConfig struct {
	// BatchSize is the most holds one transaction expires. Defaults to 500.
	BatchSize int
	// Interval is how long the expirer sleeps after a batch that was not
	// full; after a full batch it runs the next at once. Defaults to 1s.
	Interval time.Duration
	// Logger receives the expirer's logs. Defaults to discarding logs.
	Logger *slog.Logger
	// Registerer receives boxoffice_holds_expired_total and
	// boxoffice_expiry_delay_seconds. Expirers sharing a Registerer share
	// the collectors. Defaults to none.
	Registerer prometheus.Registerer
}

// Expirer is the expiry worker (docs/design/payments.md): it expires active holds
// past their expires_at by the database clock, in batches, each in one
// transaction that, through ExpiredHolds (the set-based OrderTx),
//
//   - claims the oldest expired active holds with their orders, FOR UPDATE
//     SKIP LOCKED, so any number of expirers (and saga steps holding an
//     order) never wait on one another and never claim a hold twice;
//   - locks the seats the holds still own in seat id order (as the hold
//     path does) and releases them; seats a newer hold already reclaimed
//     stay with that hold;
//   - marks the holds expired and their orders, if still pending_payment,
//     failed;
//   - writes HoldExpired per hold, and AuthorizationCancelRequested
//     (reason hold_expired) per failed order with a PaymentIntent for
//     which no cancel was requested yet.
//
// A confirmed hold is never touched, whatever its expires_at says.
// Expiry is durable data plus a repeatable query, not a timer: an expirer
// that was down catches up in full batches, one after another, when it
// comes back.
type Expirer struct {
	pool    *pgxpool.Pool
	cfg     ExpirerConfig
	logger  *slog.Logger
	expired prometheus.Counter
	delay   prometheus.Observer
	lastRun prometheus.Gauge
}

// NewExpirer returns the expirer cfg describes, expiring holds in pool.
func NewExpirer(pool *pgxpool.Pool, cfg ExpirerConfig) *Expirer {
	if pool == nil {
		panic("purchase.NewExpirer: pool is required")
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 500
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Expirer{
		pool:   pool,
		cfg:    cfg,
		logger: cfg.Logger.With("component", "expirer"),
		expired: promreg.Counter(cfg.Registerer, "boxoffice_holds_expired_total",
			"Holds the expiry worker expired."),
		lastRun: promreg.Gauge(cfg.Registerer, "boxoffice_expiry_last_run_timestamp_seconds",
			"When the expiry worker last finished a batch (Unix time), with or without holds to expire: it goes stale when the expirer stops."),
		delay: promreg.Histogram(cfg.Registerer, "boxoffice_expiry_delay_seconds",
			"How long past its expires_at an active hold was when the expiry worker claimed it, by the database clock.", []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 300}),
	}
}

// errorPause bounds the pause after a failed batch.
const errorPause = 30 * time.Second

// Run expires holds until ctx is done, then returns nil. A full batch is
// followed by the next at once; otherwise Run sleeps Interval. A failed
// batch (rolled back whole) is logged and retried after a pause that
// doubles with consecutive failures from 2·Interval, up to 32·Interval or
// 30s (Interval, if longer), whichever is shorter.
func (e *Expirer) Run(ctx context.Context) error {
	e.logger.InfoContext(ctx, "expirer started", "batch_size", e.cfg.BatchSize, "interval", e.cfg.Interval.String())
	failures := 0
	retry := backoff.Policy{Base: 2 * e.cfg.Interval, Max: min(32*e.cfg.Interval, max(errorPause, e.cfg.Interval))}
	for {
		n, err := e.ExpireBatch(ctx)
		pause := e.cfg.Interval
		switch {
		case ctx.Err() != nil:
			e.logger.InfoContext(ctx, "expirer stopped")
			return nil
		case err != nil:
			failures++
			pause = retry.Delay(failures)
			e.logger.ErrorContext(ctx, "expire holds", "error", err.Error(), "retry_in", pause.String())
		case n == e.cfg.BatchSize:
			failures = 0
			continue
		default:
			failures = 0
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			e.logger.InfoContext(ctx, "expirer stopped")
			return nil
		case <-t.C:
		}
	}
}

// ExpireBatch expires at most BatchSize holds in one transaction (see
// Expirer) and returns how many it expired. Safe to run concurrently with
// itself, other expirers, saga steps and holds.
func (e *Expirer) ExpireBatch(ctx context.Context) (int, error) {
	type result struct {
		claimed []ExpiredHold
		failed  int
		cancels int
	}
	// A batch is not cut short by ctx: stopping mid-commit could leave a
	// committed batch reported as failed (and uncounted). Run checks ctx
	// between batches.
	txCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	r, err := db.WithTxV(txCtx, e.pool, func(ctx context.Context, tx pgx.Tx) (result, error) {
		batch, err := ClaimExpiredHolds(ctx, tx, e.cfg.BatchSize, nil)
		if err != nil || batch.Len() == 0 {
			return result{}, err
		}
		if _, err := batch.ReleaseSeats(ctx); err != nil {
			return result{}, err
		}
		if err := batch.MoveHolds(ctx, HoldExpired); err != nil {
			return result{}, err
		}
		failed, err := batch.MoveOrders(ctx, OrderPendingPayment, OrderFailed)
		if err != nil {
			return result{}, err
		}
		if err := batch.EmitExpired(ctx); err != nil {
			return result{}, err
		}
		cancels, err := batch.RequestCancels(ctx, failed, ReasonHoldExpired)
		if err != nil {
			return result{}, err
		}
		return result{claimed: batch.Claimed(), failed: len(failed), cancels: cancels}, nil
	})
	if err != nil {
		return 0, err
	}
	e.lastRun.SetToCurrentTime()
	if len(r.claimed) == 0 {
		return 0, nil
	}
	// Observed only once committed: a transaction retried after a
	// deadlock must not count twice.
	e.expired.Add(float64(len(r.claimed)))
	for _, c := range r.claimed {
		e.delay.Observe(c.DelaySeconds)
		e.logger.DebugContext(ctx, "hold expired", "order_id", c.OrderID, "hold_id", c.HoldID,
			"correlation_id", c.CorrelationID, "delay_seconds", c.DelaySeconds)
	}
	e.logger.InfoContext(ctx, "holds expired", "holds", len(r.claimed), "orders_failed", r.failed,
		"cancels_requested", r.cancels, "max_delay_seconds", r.claimed[0].DelaySeconds)
	return len(r.claimed), nil
}
