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
var WaitlistSubjects = append(
	bus.Subjects(outbox.AggregateOrder, outbox.TypeHoldExpired, outbox.TypeOrderCanceled, outbox.TypeRefundRequested, outbox.TypePaymentFailed),
	bus.Subject(outbox.AggregateEvent, outbox.TypeSeatsReleased))

// NewWaitlist returns the waitlist consumer (WaitlistPlan, applying
// WaitlistHandler). cfg.Name and cfg.FilterSubjects are set here; the
// other fields are as for New.
func NewWaitlist(pool *pgxpool.Pool, js jetstream.JetStream, cfg Config, w *waitlist.Service) (*Consumer, error) {
	cfg.Name = WaitlistName
	cfg.FilterSubjects = WaitlistSubjects
	return NewBatch(pool, js, cfg, WaitlistPlan(w))
}

// WaitlistPlan is the waitlist consumer's BatchFunc: one read for the
// batch (waitlist.Service.Waiting) finds the events whose event nobody
// waits for, and those are acked with no transaction, no inbox row and no
// lock (ErrNoEffect): an onsale without a waitlist pays one read per batch
// of expired holds, not a transaction per hold queued on the event's
// waitlist lock. The others run WaitlistHandler in the inbox transaction.
// The read takes no lock, so a join committing meanwhile is missed;
// waitlist.Service.Join runs a round of its own once its entry is in.
func WaitlistPlan(w *waitlist.Service) BatchFunc {
	handle := WaitlistHandler(w)
	return func(ctx context.Context, evs []outbox.Envelope) (BatchPlan, error) {
		keys := make([]uuid.UUID, len(evs))
		ids := make([]uuid.UUID, 0, len(evs))
		for i, ev := range evs {
			keys[i] = waitlistKey(ev)
			if keys[i] != uuid.Nil {
				ids = append(ids, keys[i])
			}
		}
		waiting, err := w.Waiting(ctx, ids)
		if err != nil {
			return BatchPlan{}, err
		}
		errs := make([]error, len(evs))
		for i := range evs {
			// An id that names nothing, or a payload that does not
			// decode, goes to the handler, which says so (permanent).
			if w, known := waiting[keys[i]]; known && !w {
				errs[i] = ErrNoEffect
			}
		}
		return BatchPlan{Errs: errs, ApplyFunc: func(ctx context.Context, tx pgx.Tx, evs []outbox.Envelope) error {
			for _, ev := range evs {
				if err := handle(ctx, tx, ev); err != nil {
					return err
				}
			}
			return nil
		}}, nil
	}
}

// waitlistKey is the id whose event's waitlist ev may concern: the
// event's for SeatsReleased, the order's for the others; uuid.Nil for a
// payload that does not decode.
func waitlistKey(ev outbox.Envelope) uuid.UUID {
	if ev.EventType != outbox.TypeSeatsReleased {
		return ev.AggregateID
	}
	var p outbox.SeatsReleased
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return uuid.Nil
	}
	return p.EventID
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
