package consumers

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"boxoffice/platform/outbox"
)

// ExternalFunc is the handler of a consumer that must call another system
// (the payment provider) for an event, which must never happen inside a
// database transaction (docs/design/consumers.md, docs/design/payments.md). It makes the call and returns the
// HandlerFunc that records its result; the runtime then runs that
// HandlerFunc in the transaction that records the inbox row, exactly as
// New runs a HandlerFunc.
//
// The call happens before the transaction, so it is repeated whenever the
// transaction does not commit (a failure, a crash, a redelivery racing the
// first delivery): it must be idempotent, e.g. by an idempotency key
// derived from the event. It is skipped for a redelivered event the inbox
// already holds, and for a message past Config.MaxDeliver.
//
// Errors follow HandlerFunc's contract and the one policy of decide: an
// error wrapping ErrPermanent dead-letters the message, any other error or
// a panic naks it with backoff, and a cancellation by shutdown releases
// it. An ExternalFunc that wants a permanent refusal to become a domain
// event instead returns a HandlerFunc that writes that event to the
// outbox, and a nil error. A nil HandlerFunc with a nil error records only
// the inbox row.
type ExternalFunc func(ctx context.Context, ev outbox.Envelope) (HandlerFunc, error)

// NewExternal returns the consumer cfg describes, applying f to each event:
// f's external call runs before the transaction, the HandlerFunc it returns
// inside it. Like New, it does not touch the server, and returns an error
// naming every invalid field of cfg.
func NewExternal(pool *pgxpool.Pool, js jetstream.JetStream, cfg Config, f ExternalFunc) (*Consumer, error) {
	if f == nil {
		return nil, errors.New("consumers.NewExternal: pool, js and external func are required")
	}
	return newConsumer(pool, js, cfg, nil, f, nil)
}
