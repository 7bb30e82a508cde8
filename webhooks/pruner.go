package webhooks

import (
	"context"
	"fmt"
	"time"

	"boxoffice/sqlcgen"
)

// pruneBatch is how many rows one prune statement deletes, so that no
// statement holds locks for long.
const pruneBatch = 1000

// Prune deletes the messages (with their deliveries and attempts,
// payloads included) and the attempts older than the retention window
// before now. Returns how many messages and attempts it deleted.
func (d *Dispatcher) Prune(ctx context.Context, now time.Time) (messages, attempts int64, err error) {
	cutoff := now.Add(-d.cfg.Retention)
	for {
		n, err := d.q.WebhookMessagePrune(ctx, d.pool, sqlcgen.WebhookMessagePruneParams{Cutoff: cutoff, MaxRows: pruneBatch})
		if err != nil {
			return messages, attempts, fmt.Errorf("prune webhook messages: %w", err)
		}
		messages += n
		if n < pruneBatch {
			break
		}
	}
	for {
		n, err := d.q.WebhookAttemptPrune(ctx, d.pool, sqlcgen.WebhookAttemptPruneParams{Cutoff: cutoff, MaxRows: pruneBatch})
		if err != nil {
			return messages, attempts, fmt.Errorf("prune webhook attempts: %w", err)
		}
		attempts += n
		if n < pruneBatch {
			break
		}
	}
	return messages, attempts, nil
}

// pruneLoop runs Prune every PruneInterval, the first time shortly after
// start.
func (d *Dispatcher) pruneLoop(ctx context.Context) {
	if !sleep(ctx, time.Minute/2) {
		return
	}
	for {
		m, a, err := d.Prune(ctx, time.Now())
		switch {
		case err != nil && ctx.Err() == nil:
			d.logger.ErrorContext(ctx, "prune webhooks", "error", err.Error())
		case m+a > 0:
			d.logger.InfoContext(ctx, "pruned webhooks", "messages", m, "attempts", a)
		}
		if !sleep(ctx, d.cfg.PruneInterval) {
			return
		}
	}
}
