package webhooks

import (
	"context"
	"fmt"
	"time"

	"boxoffice/platform/backoff"
	"boxoffice/sqlcgen"
)

// pruneBatch is how many rows one prune statement deletes, so that no
// statement holds locks for long.
const pruneBatch = 1000

// Prune deletes the messages older than the retention window before now,
// payloads included, with their deliveries and attempts (an attempt is
// never older than its message, so no attempt outlives the window).
// Returns how many messages it deleted.
func (d *Dispatcher) Prune(ctx context.Context, now time.Time) (messages int64, err error) {
	cutoff := now.Add(-d.cfg.Retention)
	for {
		n, err := d.q.WebhookMessagePrune(ctx, d.pool, sqlcgen.WebhookMessagePruneParams{Cutoff: cutoff, MaxRows: pruneBatch})
		if err != nil {
			return messages, fmt.Errorf("prune webhook messages: %w", err)
		}
		messages += n
		if n < pruneBatch {
			return messages, nil
		}
	}
}

// pruneLoop runs Prune every PruneInterval, the first time shortly after
// start.
func (d *Dispatcher) pruneLoop(ctx context.Context) {
	if !sleep(ctx, time.Minute/2) {
		return
	}
	backoff.Every(ctx, d.cfg.PruneInterval, d.pruneNow)
}

// pruneNow runs Prune once and logs what it did.
func (d *Dispatcher) pruneNow(ctx context.Context) {
	m, err := d.Prune(ctx, time.Now())
	switch {
	case err != nil && ctx.Err() == nil:
		d.logger.ErrorContext(ctx, "prune webhooks", "error", err.Error())
	case m > 0:
		d.logger.InfoContext(ctx, "pruned webhook messages with their deliveries and attempts", "messages", m)
	}
}
