package consumers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"boxoffice/domain/catalog"
	"boxoffice/domain/purchase"
	"boxoffice/domain/waitlist"
	"boxoffice/platform/bus"
	"boxoffice/platform/inbox"
	"boxoffice/platform/outbox"
)

// WaitlistName is the durable name of the consumer that offers returned
// seats to waitlists.
const WaitlistName = "waitlist"

// WaitlistSubjects are the events after which an event's seats may be
// back on sale: an expired hold, a canceled order, a refund (that may
// resell its seats), a payment that failed (the saga may fail the order
// and release its seats), blocks the organizer released.
var WaitlistSubjects = []string{
	bus.SubjectPrefix + outbox.AggregateOrder + "." + outbox.TypeHoldExpired,
	bus.SubjectPrefix + outbox.AggregateOrder + "." + outbox.TypeOrderCanceled,
	bus.SubjectPrefix + outbox.AggregateOrder + "." + outbox.TypeRefundRequested,
	bus.SubjectPrefix + outbox.AggregateOrder + "." + outbox.TypePaymentFailed,
	bus.SubjectPrefix + outbox.AggregateEvent + "." + outbox.TypeSeatsReleased,
}

// NewWaitlist returns the waitlist consumer (WaitlistHandler). cfg.Name
// and cfg.FilterSubjects are set here; the other fields are as for New.
func NewWaitlist(pool *pgxpool.Pool, js jetstream.JetStream, cfg Config, w *waitlist.Service) (*Consumer, error) {
	cfg.Name = WaitlistName
	cfg.FilterSubjects = WaitlistSubjects
	return New(pool, js, cfg, WaitlistHandler(w))
}

// errSagaFirst: the purchase saga has not applied the PaymentFailed yet;
// the seats it may release are not free until it has.
var errSagaFirst = errors.New("payment failure not applied by the purchase saga yet")

// WaitlistHandler is the HandlerFunc of the waitlist consumer: for each
// event that may have freed seats it runs an offer round of the event
// (waitlist.Service.OfferRound) in the inbox transaction. The round
// offers what is free when it runs, so the event's seats need not be
// named, and a redelivery (or a second event about the same seats)
// offers nothing twice. A PaymentFailed waits (a transient error, retried
// with backoff) until the purchase saga applied it: the saga is what
// fails the order and releases its seats. An order that does not exist
// or a payload that does not decode is permanent.
func WaitlistHandler(w *waitlist.Service) HandlerFunc {
	return func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
		var eventID uuid.UUID
		switch ev.EventType {
		case outbox.TypeSeatsReleased:
			var p outbox.SeatsReleased
			if err := json.Unmarshal(ev.Payload, &p); err != nil || p.EventID == uuid.Nil {
				return Permanent(errors.New("SeatsReleased payload does not decode"))
			}
			eventID = p.EventID
		case outbox.TypePaymentFailed:
			if ev.AppliedBy != purchase.SagaConsumer {
				applied, err := inbox.Applied(ctx, tx, purchase.SagaConsumer, []uuid.UUID{ev.EventID})
				if err != nil {
					return fmt.Errorf("read saga's inbox: %w", err)
				}
				if len(applied) == 0 {
					return errSagaFirst
				}
			}
			fallthrough
		case outbox.TypeHoldExpired, outbox.TypeOrderCanceled, outbox.TypeRefundRequested:
			id, err := waitlist.EventOfOrder(ctx, tx, ev.AggregateID)
			if errors.Is(err, catalog.ErrNotFound) {
				return Permanent(fmt.Errorf("%s of an unknown order", ev.EventType))
			} else if err != nil {
				return err
			}
			eventID = id
		default:
			return nil
		}
		if _, err := w.OfferRound(ctx, tx, eventID, ev.CorrelationID); err != nil {
			return fmt.Errorf("offer returned seats: %w", err)
		}
		return nil
	}
}
