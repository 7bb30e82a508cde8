package consumers

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"boxoffice/domain/purchase"
	"boxoffice/platform/bus"
	"boxoffice/platform/outbox"
)

// PurchaseSagaName is the durable name of the purchase saga's consumer.
const PurchaseSagaName = purchase.SagaConsumer

// PurchaseSagaSubjects are the subjects the purchase saga reads, one per
// event type it has a step for (purchase.SagaTypes).
var PurchaseSagaSubjects = bus.Subjects(outbox.AggregateOrder, purchase.SagaTypes()...)

// PurchaseSagaConfig is the purchase saga's consumer configuration: its
// name and subjects. The caller adds Logger and Registerer (and may tune
// the rest).
func PurchaseSagaConfig() Config {
	return Config{Name: PurchaseSagaName, FilterSubjects: PurchaseSagaSubjects}
}

// NewPurchaseSaga returns the purchase saga's consumer, applying saga's
// steps. cfg.Name and cfg.FilterSubjects are set here (PurchaseSagaName,
// PurchaseSagaSubjects); the other fields are as for New.
func NewPurchaseSaga(pool *pgxpool.Pool, js jetstream.JetStream, cfg Config, saga *purchase.Saga) (*Consumer, error) {
	cfg.Name = PurchaseSagaName
	cfg.FilterSubjects = PurchaseSagaSubjects
	return New(pool, js, cfg, PurchaseSagaHandler(saga))
}

// PurchaseSagaHandler is the HandlerFunc of the purchase saga: it runs the
// saga step of the event's type in the inbox transaction.
//
// A step's purchase.ErrPermanent (fault.ErrPermanent: a payload that does
// not decode, an unknown order) dead-letters the message. Its purchase.ErrTooEarly (an
// event that overtook the one it follows, such as a capture before its
// authorization), like any other error, rolls back and naks with backoff,
// so the event is applied once the state it needs is there. Event types
// the saga does not handle are acked without effect.
func PurchaseSagaHandler(saga *purchase.Saga) HandlerFunc {
	sagaTypes := purchase.SagaTypes()
	return func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
		if !slices.Contains(sagaTypes, ev.EventType) {
			return nil
		}
		return saga.Apply(ctx, tx, ev, nil)
	}
}
