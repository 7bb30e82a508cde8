// This file owns recording: the flush loop, decide (an attempt's
// delivery's next state), one batch's transaction, and the metrics and logs
// of each attempt once it is recorded.

package webhooks

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/platform/backoff"
	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
)

// Timings of recording.
const (
	flushTimeout  = 30 * time.Second
	flushAttempts = 3
)

// flushRetries is the wait after a failed recording: 100ms a try.
var flushRetries = backoff.Policy{Base: 100 * time.Millisecond, Power: 1}

// flushLoop records finished attempts in batches: BatchSize of them, or
// whatever FlushInterval collected. Config.Flushers of them share the
// results, so recording runs on several connections at once.
func (d *Dispatcher) flushLoop(ctx context.Context) {
	t := time.NewTicker(d.cfg.FlushInterval)
	defer t.Stop()
	var batch []result
	for {
		select {
		case r, ok := <-d.results:
			if !ok {
				d.flush(ctx, batch)
				return
			}
			batch = append(batch, r)
			if len(batch) >= d.cfg.BatchSize {
				d.flush(ctx, batch)
				batch = nil
			}
		case <-t.C:
			if len(batch) > 0 {
				d.flush(ctx, batch)
				batch = nil
			}
		}
	}
}

// deadExhausted is the dead-letter reason of a delivery whose retries ran
// out: the one that makes a delivery.exhausted notice.
const deadExhausted = "exhausted"

// outcome is what a batch does to one delivery.
type outcome struct {
	status string
	delay  time.Duration
	reason string // dead-letter reason, when status is dead
}

// decide turns an attempt into its delivery's next state: succeeded, dead
// (with why), needs_review, or pending again after the delay its retry
// schedule gives the attempts made since RetryBase, jittered by
// platform/backoff (the one home of jitter), and never sooner than the
// endpoint's Retry-After.
//
// It is not the consumer runtime's decide (consumers/decide.go), and
// sharing one would merge two different decisions: that one maps a
// handler's outcome to what JetStream does with a message (ack, nak after
// backoff.Policy's formula, dead-letter), this one maps an HTTP answer's
// verdict to a row's next state on a schedule that is a list of delays
// (RetrySchedule, Svix's by default), which no backoff.Policy formula
// reproduces.
func (d *Dispatcher) decide(r result) outcome {
	switch r.verdict {
	case verdictSuccess:
		return outcome{status: StatusSucceeded}
	case verdictGone:
		return outcome{status: StatusDead, reason: "gone"}
	case verdictReview:
		return outcome{status: StatusNeedsReview}
	case verdictTerminal:
		reason := "terminal"
		switch r.Class {
		case ClassRefused:
			reason = "refused"
		case ClassPayloadTooLarge:
			reason = "payload_too_large"
		}
		return outcome{status: StatusDead, reason: reason}
	}
	made := int(r.Number - r.Delivery.RetryBase)
	if made >= len(d.cfg.RetrySchedule) {
		return outcome{status: StatusDead, reason: deadExhausted}
	}
	delay := max(d.jitter(d.cfg.RetrySchedule[made]), r.retryAfter)
	return outcome{status: StatusPending, delay: delay}
}

// flush records a batch of attempts and their deliveries' new states in
// one transaction, then updates the endpoints' health. A batch that cannot
// be recorded is logged and dropped: its deliveries' leases run out and
// they are sent again (at least once).
//
// The transaction commits without waiting for its WAL flush
// (synchronous_commit off): a database crash can lose the last fraction
// of a second of recorded outcomes, which costs exactly what a dispatcher
// crash before recording costs — the deliveries are sent again with the
// same webhook-id — and makes recording several times cheaper.
func (d *Dispatcher) flush(ctx context.Context, batch []result) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	slices.SortFunc(batch, func(a, b result) int { return bytes.Compare(a.Delivery.ID[:], b.Delivery.ID[:]) })
	attempts := make([]sqlcgen.WebhookAttemptInsertParams, len(batch))
	succeeded := sqlcgen.WebhookDeliverySucceedParams{DispatcherID: d.cfg.ID}
	complete := sqlcgen.WebhookDeliveryCompleteParams{DispatcherID: d.cfg.ID}
	outcomes := make([]outcome, len(batch))
	order, tallies := tallyHealth(batch)
	for i, r := range batch {
		o := d.decide(r)
		outcomes[i] = o
		var status *int32
		if r.StatusCode > 0 {
			s := int32(r.StatusCode)
			status = &s
		}
		attempts[i] = sqlcgen.WebhookAttemptInsertParams{
			DeliveryID: r.Delivery.ID, MessageID: r.Delivery.MessageID, EndpointID: r.Delivery.EndpointID,
			OrganizerID: r.Delivery.OrganizerID, Number: r.Number, Trigger: r.Trigger, StatusCode: status,
			LatencyMs: int32(r.Latency.Milliseconds()), ErrorClass: r.Class, ResponseBody: r.Response, CreatedAt: r.At,
		}
		if o.status == StatusSucceeded {
			succeeded.Ids = append(succeeded.Ids, r.Delivery.ID)
			continue
		}
		complete.Ids = append(complete.Ids, r.Delivery.ID)
		complete.Statuses = append(complete.Statuses, o.status)
		complete.DelaysMs = append(complete.DelaysMs, o.delay.Milliseconds())
		complete.LastErrors = append(complete.LastErrors, lastError(r))
	}
	var disabled map[uuid.UUID]string
	var err error
	for try := 1; try <= flushAttempts; try++ {
		disabled, err = db.WithTxV(ctx, d.pool, func(ctx context.Context, tx pgx.Tx) (map[uuid.UUID]string, error) {
			if err := d.q.WebhookFlushAsyncCommit(ctx, tx); err != nil {
				return nil, fmt.Errorf("relax commit: %w", err)
			}
			if _, err := d.q.WebhookAttemptInsert(ctx, tx, attempts); err != nil {
				return nil, fmt.Errorf("insert attempts: %w", err)
			}
			if len(succeeded.Ids) > 0 {
				if err := d.q.WebhookDeliverySucceed(ctx, tx, succeeded); err != nil {
					return nil, fmt.Errorf("complete succeeded deliveries: %w", err)
				}
			}
			if len(complete.Ids) > 0 {
				if err := d.q.WebhookDeliveryComplete(ctx, tx, complete); err != nil {
					return nil, fmt.Errorf("complete failed deliveries: %w", err)
				}
			}
			for i, r := range batch {
				switch {
				case outcomes[i].reason == deadExhausted:
					if err := d.noticeExhausted(ctx, tx, r); err != nil {
						return nil, err
					}
				case outcomes[i].status == StatusNeedsReview:
					if err := d.noticeNeedsReview(ctx, tx, r); err != nil {
						return nil, err
					}
				}
			}
			return d.recordHealth(ctx, tx, order, tallies)
		})
		if err == nil || ctx.Err() != nil {
			break
		}
		sleep(ctx, flushRetries.Delay(try))
	}
	if err != nil {
		d.logger.ErrorContext(ctx, "record webhook attempts; their deliveries will be sent again", "error", err.Error(), "attempts", len(batch))
		return
	}
	for i, r := range batch {
		d.observe(ctx, r, outcomes[i])
	}
	for id, reason := range disabled {
		d.logger.WarnContext(ctx, "webhook endpoint disabled", "endpoint_id", id.String(), "reason", reason)
	}
}

func lastError(r result) string {
	if r.StatusCode > 0 {
		return r.Class + " (status " + strconv.Itoa(r.StatusCode) + ")"
	}
	return r.Class
}

// observe updates the metrics and logs an attempt once it is recorded.
// Logs name the message, endpoint, organizer and order, never the URL or
// a secret.
func (d *Dispatcher) observe(ctx context.Context, r result, o outcome) {
	m := d.metrics
	m.attempts.WithLabelValues(r.Class, r.Trigger).Inc()
	m.attemptSeconds.Observe(r.Latency.Seconds())
	if r.sent && r.Delivery.AcknowledgedAt != nil {
		// The endpoint had acknowledged this webhook-id before (a recorded
		// 2xx): a replay or a recover. A send again after a 2xx whose
		// recording was lost leaves no trace to tell it by.
		m.duplicates.Inc()
	}
	attrs := []any{
		"msg_id", MessageID(r.Delivery.MessageID), "delivery_id", r.Delivery.ID.String(),
		"endpoint_id", r.Delivery.EndpointID.String(), "organizer_id", r.Delivery.OrganizerID.String(),
		"attempt", r.Number, "trigger", r.Trigger, "error_class", r.Class, "status_code", r.StatusCode,
		"latency_ms", r.Latency.Milliseconds(),
	}
	if r.Delivery.OrderID != nil {
		attrs = append(attrs, "order_id", r.Delivery.OrderID.String(), "correlation_id", r.Delivery.CorrelationID)
	}
	switch o.status {
	case StatusSucceeded:
		m.successLatency.Observe(time.Since(r.Delivery.MessageCreatedAt).Seconds())
		m.attemptsPerMsg.Observe(float64(r.Number))
		d.logger.DebugContext(ctx, "webhook delivered", attrs...)
	case StatusDead:
		m.attemptsPerMsg.Observe(float64(r.Number))
		m.deadLetters.WithLabelValues(o.reason).Inc()
		d.logger.WarnContext(ctx, "webhook delivery dead", append(attrs, "reason", o.reason)...)
	case StatusNeedsReview:
		m.attemptsPerMsg.Observe(float64(r.Number))
		m.needsReview.WithLabelValues(r.Class).Inc()
		d.logger.WarnContext(ctx, "webhook delivery needs review: terminal answer", attrs...)
	default:
		d.logger.InfoContext(ctx, "webhook attempt failed; will retry", append(attrs, "retry_in_ms", o.delay.Milliseconds())...)
	}
}
