package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/domain/payments"
	"boxoffice/platform/backoff"
	"boxoffice/platform/promreg"
)

// lockKey is the PostgreSQL advisory lock a scheduled run holds, so that
// one process of the cell reconciles at a time.
const lockKey = 0x7265636f6e63696c // "reconcil"

// DefaultInterval is the time between runs when ScheduleConfig leaves
// Interval zero (and the default of BOXOFFICE_RECONCILE_INTERVAL).
const DefaultInterval = 15 * time.Minute

// ScheduleConfig configures a Schedule.
type ScheduleConfig struct {
	Pool     *pgxpool.Pool
	Provider payments.Provider
	// Interval is the time between runs. Defaults to DefaultInterval.
	Interval time.Duration
	// Window is how far back each run looks: intents created in
	// [now-Window, now). Defaults to 24h.
	Window time.Duration
	// Settle is Config.Settle.
	Settle time.Duration
	// Logger is required.
	Logger *slog.Logger
	// Registerer receives the schedule's metrics. Defaults to none.
	Registerer prometheus.Registerer
}

// Schedule runs reconciliation every Interval, in one process of the cell
// at a time: a run holds a session advisory lock on its own connection
// (released when the run ends, or by PostgreSQL when the process dies),
// and a process that finds it held skips that run. What runs find and
// repair is counted per repair, so an operator sees lost webhooks and
// commands as a rate, not only in a report nobody reads.
type Schedule struct {
	cfg      ScheduleConfig
	logger   *slog.Logger
	runs     *prometheus.CounterVec
	found    *prometheus.CounterVec
	repaired *prometheus.CounterVec
	lastRun  prometheus.Gauge
}

// NewSchedule returns the Schedule cfg describes.
func NewSchedule(cfg ScheduleConfig) *Schedule {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Window <= 0 {
		cfg.Window = 24 * time.Hour
	}
	s := &Schedule{
		cfg:    cfg,
		logger: cfg.Logger.With("component", "reconcile"),
		runs: promreg.CounterVec(cfg.Registerer, "boxoffice_reconcile_runs_total",
			"Scheduled reconciliation runs by outcome: ok, failed, or skipped (another process held the lock).", "outcome"),
		found: promreg.CounterVec(cfg.Registerer, "boxoffice_reconcile_findings_total",
			"Mismatches between the provider and orders that scheduled runs found, by repair (\"none\": reported only). A mismatch stays found, run after run, until the saga has acted.", "repair"),
		repaired: promreg.CounterVec(cfg.Registerer, "boxoffice_reconcile_repairs_total",
			"Repairs scheduled runs wrote (each once per intent), by repair.", "repair"),
		lastRun: promreg.Gauge(cfg.Registerer, "boxoffice_reconcile_last_run_timestamp_seconds",
			"When a scheduled reconciliation run last finished without error (Unix time)."),
	}
	for _, r := range append([]string{"none"}, Repairs...) {
		s.found.WithLabelValues(r)
		s.repaired.WithLabelValues(r)
	}
	return s
}

// Run reconciles every Interval, the first time one Interval after it
// starts (a fleet of workers restarting together does not list the
// provider's day at once), until ctx is done; a failed run is logged and
// tried again at the next interval.
func (s *Schedule) Run(ctx context.Context) error {
	return backoff.Ticks(ctx, s.cfg.Interval, func(ctx context.Context) error {
		if _, _, err := s.RunOnce(ctx); err != nil && ctx.Err() == nil {
			s.logger.ErrorContext(ctx, "scheduled reconciliation failed", "error", err.Error())
		}
		return nil
	})
}

// RunOnce runs one reconciliation over the last Window under the lock, and
// reports whether it ran (false: another process holds the lock).
func (s *Schedule) RunOnce(ctx context.Context) (Report, bool, error) {
	conn, err := s.cfg.Pool.Acquire(ctx)
	if err != nil {
		return Report{}, false, fmt.Errorf("acquire connection for the reconcile lock: %w", err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(lockKey)).Scan(&locked); err != nil {
		return Report{}, false, fmt.Errorf("take the reconcile lock: %w", err)
	}
	if !locked {
		s.runs.WithLabelValues("skipped").Inc()
		return Report{}, false, nil
	}
	defer func() {
		// A fresh context: the lock must go even when ctx has ended. Were
		// the unlock to fail, the connection would go back to the pool
		// holding it; close it instead, which releases it.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", int64(lockKey)); err != nil {
			_ = conn.Conn().Close(uctx)
		}
	}()
	// The provider lists by whole seconds, end excluded: a second past now
	// includes the intents created this second.
	to := time.Now().Add(time.Second)
	r, err := Run(ctx, Config{Pool: s.cfg.Pool, Provider: s.cfg.Provider, Logger: s.logger, Settle: s.cfg.Settle}, to.Add(-s.cfg.Window), to)
	for _, f := range r.Findings {
		s.found.WithLabelValues(cmp.Or(f.Repair, "none")).Inc()
		if f.Applied {
			s.repaired.WithLabelValues(f.Repair).Inc()
		}
	}
	if err != nil {
		s.runs.WithLabelValues("failed").Inc()
		return r, true, err
	}
	s.runs.WithLabelValues("ok").Inc()
	s.lastRun.SetToCurrentTime()
	s.logger.InfoContext(ctx, "scheduled reconciliation", "intents", r.Intents, "findings", len(r.Findings))
	return r, true, nil
}
