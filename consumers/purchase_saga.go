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

// purchaseSagaTypes are the event types the saga reacts to (docs/saga.md,
// the purchase_saga rows). HoldCreated is not one: the hold transaction
// writes its PaymentAuthorizationRequested itself, and a saga reading
// HoldCreated too would request a second PaymentIntent.
var purchaseSagaTypes = []string{
	outbox.TypePaymentIntentCreated,
	outbox.TypePaymentAuthorized,
	outbox.TypePaymentCaptured,
	outbox.TypePaymentFailed,
	outbox.TypePaymentRefunded,
	outbox.TypeAuthorizationCanceled,
}

// PurchaseSagaSubjects are the subjects the purchase saga reads, one per
// event type it handles.
var PurchaseSagaSubjects = func() []string {
	subjects := make([]string, len(purchaseSagaTypes))
	for i, t := range purchaseSagaTypes {
		subjects[i] = bus.SubjectPrefix + outbox.AggregateOrder + "." + t
	}
	return subjects
}()

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
	return func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
		if !slices.Contains(purchaseSagaTypes, ev.EventType) {
			return nil
		}
		return saga.Apply(ctx, tx, ev, nil)
	}
}
