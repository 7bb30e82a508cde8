package waitlist

import (
	"context"
	"time"

	"boxoffice/platform/backoff"
)

// SweeperConfig configures Sweeper. Zero values stand for their defaults.
type SweeperConfig struct {
	// BatchSize is the most offers one transaction ends. Defaults to 100.
	BatchSize int
	// Interval is how long the sweeper sleeps after a batch that was not
	// full. Defaults to 1s.
	Interval time.Duration
}

// Sweeper ends offers past their expiry and passes their seats to the
// next entries (Service.ExpireOffers), as the expiry worker does for
// holds: durable data and a repeatable query, so a sweeper that was down
// catches up when it comes back, and any number may run at once.
type Sweeper struct {
	s   *Service
	cfg SweeperConfig
}

// NewSweeper returns the sweeper of s's offers.
func NewSweeper(s *Service, cfg SweeperConfig) *Sweeper {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 100
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	return &Sweeper{s: s, cfg: cfg}
}

// Run ends expired offers until ctx is done, then returns nil. A failed
// batch (rolled back whole) is logged and retried after a pause that
// doubles with consecutive failures, up to 30s.
func (w *Sweeper) Run(ctx context.Context) error {
	logger := w.s.logger.With("component", "waitlist_sweeper")
	retry := backoff.Policy{Base: 2 * w.cfg.Interval, Max: max(30*time.Second, w.cfg.Interval)}
	failures := 0
	for {
		// A batch is not cut short by ctx (a committed batch must not be
		// reported failed); Run checks ctx between batches.
		batchCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		n, err := w.s.ExpireOffers(batchCtx, w.cfg.BatchSize)
		cancel()
		pause := w.cfg.Interval
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			failures++
			pause = retry.Delay(failures)
			logger.ErrorContext(ctx, "expire waitlist offers", "error", err.Error(), "retry_in", pause.String())
		case n == w.cfg.BatchSize:
			failures = 0
			continue
		default:
			failures = 0
			if n > 0 {
				logger.InfoContext(ctx, "waitlist offers expired", "offers", n)
			}
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}
