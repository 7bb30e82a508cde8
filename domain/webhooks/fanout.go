package webhooks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/platform/bus"
	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/platform/outbox"
	"boxoffice/sqlcgen"
)

// FanOutSubjects are the subjects the fan-out reads: the domain events
// that become public facts. They are in default terms; the consumer
// runtime maps them into its namespace (consumers.Config.Bus).
var FanOutSubjects = func() []string {
	s := make([]string, len(sourceTypes))
	for i, t := range sourceTypes {
		s[i] = bus.SubjectPrefix + outbox.AggregateOrder + "." + t
	}
	return s
}()

// FanOutHandler is the fan-out's handler, run by the consumer runtime as
// the durable consumer consumers.NewWebhooksFanOut (the runtime lives in
// package consumers, which imports this one; this package never imports
// it). In the inbox transaction of each event it stores the public facts the event stands for — one
// immutable message per (organizer, fact), its bytes fixed once — and one
// pending delivery per enabled endpoint of the order's organizer that
// subscribes to the fact's type. The inbox row makes a redelivered event
// a no-op, and the message's unique (organizer, source key) makes a fact
// that arrives twice by another path one message.
//
// An organizer with no subscribed endpoint gets no message. An unknown
// order or an undecodable payload is permanent (dead-lettered); a payment
// failure the saga has not applied yet is retried with backoff. A
// permanent error is marked with fault.Permanent, which the runtime
// dead-letters.
func FanOutHandler(logger *slog.Logger) func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
	logger = logger.With("component", "webhooks_fanout")
	q := sqlcgen.New()
	return func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
		if !isSource(ev.EventType) {
			return nil
		}
		tx = db.InterpretingTx(tx) // whoever began it: a missing row is db.ErrNotFound
		order, err := q.WebhookOrderSubject(ctx, tx, ev.AggregateID)
		switch {
		case errors.Is(err, db.ErrNotFound):
			return fault.Permanent(fmt.Errorf("%s names an unknown order", ev.EventType))
		case err != nil:
			return fmt.Errorf("read order of %s: %w", ev.EventType, err)
		}
		facts, err := factsOf(ev, order)
		switch {
		case errors.Is(err, errUndecodable):
			return fault.Permanent(err)
		case err != nil:
			return err
		}
		for _, f := range facts {
			subscribed, err := q.WebhookEndpointAnyForOrganizer(ctx, tx, sqlcgen.WebhookEndpointAnyForOrganizerParams{
				OrganizerID: order.OrganizerID, EventType: f.eventType,
			})
			if err != nil {
				return fmt.Errorf("find endpoints for %s: %w", f.eventType, err)
			}
			if !subscribed {
				continue
			}
			body, err := encodeBody(f.eventType, ev.OccurredAt, f.data)
			if err != nil {
				return fault.Permanent(err)
			}
			orderID := ev.AggregateID
			msgID, err := q.WebhookMessageInsert(ctx, tx, sqlcgen.WebhookMessageInsertParams{
				ID: uuid.Must(uuid.NewV7()), OrganizerID: order.OrganizerID, EventType: f.eventType,
				Payload: body, SourceKey: f.sourceKey, OrderID: &orderID, CorrelationID: ev.CorrelationID, CreatedAt: ev.OccurredAt,
			})
			switch {
			case errors.Is(err, db.ErrNotFound):
				continue // this fact was stored before
			case err != nil:
				return fmt.Errorf("store %s message: %w", f.eventType, err)
			}
			n, err := q.WebhookDeliveryFanOut(ctx, tx, sqlcgen.WebhookDeliveryFanOutParams{
				MessageID: msgID, OrganizerID: order.OrganizerID, EventType: f.eventType,
			})
			if err != nil {
				return fmt.Errorf("queue %s deliveries: %w", f.eventType, err)
			}
			logger.InfoContext(ctx, "webhook message stored",
				"msg_id", MessageID(msgID), "type", f.eventType, "order_id", ev.AggregateID.String(),
				"organizer_id", order.OrganizerID.String(), "deliveries", n,
				"correlation_id", ev.CorrelationID, "causation_id", ev.EventID.String())
		}
		return nil
	}
}

func isSource(t string) bool {
	for _, s := range sourceTypes {
		if s == t {
			return true
		}
	}
	return false
}
