// This file owns endpoint health: what a batch of attempts says about
// each endpoint, and its recording (circuits closed or opened, endpoints
// disabled) in the batch's transaction.

package webhooks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
)

// endpointTally is what a batch says about one endpoint's health.
type endpointTally struct {
	succeeded bool
	// trailing counts the retryable failures after the batch's last
	// success.
	trailing int
	gone     bool
}

// tallyHealth is what batch says about each of its endpoints, in the
// order the endpoints first appear when the attempts are taken in the
// order they ended (not the id order the batch is recorded in).
func tallyHealth(batch []result) (order []uuid.UUID, tallies map[uuid.UUID]*endpointTally) {
	tallies = map[uuid.UUID]*endpointTally{}
	byTime := slices.Clone(batch)
	slices.SortStableFunc(byTime, func(a, b result) int { return a.At.Add(a.Latency).Compare(b.At.Add(b.Latency)) })
	for _, r := range byTime {
		t := tallies[r.Delivery.EndpointID]
		if t == nil {
			t = &endpointTally{}
			tallies[r.Delivery.EndpointID] = t
			order = append(order, r.Delivery.EndpointID)
		}
		switch r.verdict {
		case verdictSuccess:
			t.succeeded, t.trailing = true, 0
		case verdictRetry:
			t.trailing++
		case verdictGone:
			t.gone = true
		}
	}
	return order, tallies
}

// recordHealth applies a batch's tallies to its endpoints: successes
// close circuits, runs of failures may open them, a 410 or days of
// failure disable the endpoint and stop its pending deliveries. Returns
// the endpoints it disabled, with the reason.
func (d *Dispatcher) recordHealth(ctx context.Context, tx pgx.Tx, order []uuid.UUID, tallies map[uuid.UUID]*endpointTally) (map[uuid.UUID]string, error) {
	var healthy []uuid.UUID
	for _, id := range order {
		if tallies[id].succeeded {
			healthy = append(healthy, id)
		}
	}
	if len(healthy) > 0 {
		if err := d.q.WebhookEndpointRecordSuccess(ctx, tx, healthy); err != nil {
			return nil, fmt.Errorf("record endpoint success: %w", err)
		}
	}
	disabled := map[uuid.UUID]string{}
	for _, id := range order {
		t := tallies[id]
		if t.trailing > 0 {
			st, err := d.q.WebhookEndpointRecordFailures(ctx, tx, sqlcgen.WebhookEndpointRecordFailuresParams{
				ID: id, Failures: int32(t.trailing),
			})
			switch {
			case errors.Is(err, db.ErrNotFound):
				continue // deleted meanwhile
			case err != nil:
				return nil, fmt.Errorf("record endpoint failures: %w", err)
			}
			if err := d.recordCircuit(ctx, tx, id, st, t.trailing); err != nil {
				return nil, err
			}
			if st.Enabled && time.Since(st.FailingSince) >= d.cfg.DisableAfter {
				disabled[id] = DisabledByFailing
			}
		}
		if t.gone {
			disabled[id] = DisabledGone
		}
	}
	for id, reason := range disabled {
		row, err := d.q.WebhookEndpointDisable(ctx, tx, sqlcgen.WebhookEndpointDisableParams{ID: id, Reason: reason})
		switch {
		case errors.Is(err, db.ErrNotFound):
			delete(disabled, id) // disabled (or deleted) meanwhile: not this batch's transition
			continue
		case err != nil:
			return nil, fmt.Errorf("disable endpoint: %w", err)
		}
		if _, err := d.q.WebhookDeliveryFailPendingByEndpoint(ctx, tx, id); err != nil {
			return nil, fmt.Errorf("stop deliveries of disabled endpoint: %w", err)
		}
		if err := d.noticeDisabled(ctx, tx, id, reason, row); err != nil {
			return nil, err
		}
	}
	return disabled, nil
}

// recordCircuit applies the breaker to failures trailing failures of the
// endpoint id, whose row (st) has just had them added to its run, and
// opens its circuit in the row when they (re)open it. The row's lock,
// taken by the update that returned st, holds until the transaction ends.
func (d *Dispatcher) recordCircuit(ctx context.Context, tx pgx.Tx, id uuid.UUID, st sqlcgen.WebhookEndpointRecordFailuresRow, failures int) error {
	b := newBreaker(d.cfg)
	b.load(st.CircuitState, nil, int(st.ConsecutiveFailures)-failures)
	now := time.Now()
	opened := false
	for range failures {
		opened = b.record(now, false) || opened
	}
	if !opened {
		return nil
	}
	if err := d.q.WebhookEndpointOpenCircuit(ctx, tx, sqlcgen.WebhookEndpointOpenCircuitParams{ID: id, OpenFor: d.cfg.CircuitCooldown}); err != nil {
		return fmt.Errorf("open endpoint circuit: %w", err)
	}
	return nil
}
