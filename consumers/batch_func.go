package consumers

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"boxoffice/platform/outbox"
)

// BatchFunc is the handler of a consumer whose work is set-based: instead
// of statements per event, one read for the whole batch before any
// transaction, and one write for all its events in the transaction that
// records their inbox rows. The runtime calls it once per batch with the
// batch's events (but those past Config.MaxDeliver), outside any
// transaction, and it returns what each event needs (BatchPlan).
//
// An error concerns every event of the batch and follows HandlerFunc's
// contract, as do the events' own errors in BatchPlan.Errs: one wrapping
// ErrPermanent dead-letters, any other (or a panic) naks with backoff, a
// cancellation by shutdown releases. It may run again for the same events
// (a redelivery, a transaction that did not commit), so it must have no
// effect of its own.
type BatchFunc func(ctx context.Context, evs []outbox.Envelope) (BatchPlan, error)

// BatchPlan is what a BatchFunc found its batch needs.
type BatchPlan struct {
	// Errs holds, at an event's index in the BatchFunc's evs, what that
	// event needs: nil, that ApplyFunc apply it; ErrNoEffect, nothing (it
	// is acked at once, with no transaction and no inbox row); any other
	// error settles its message as a HandlerFunc's error would, and the
	// rest of the batch goes on without it. Errs is nil (every event is
	// applied) or as long as evs.
	Errs []error
	// ApplyFunc applies the events whose Errs are nil; when it is nil,
	// they get their inbox rows only.
	ApplyFunc ApplyFunc
}

// ApplyFunc applies, in tx, the effects of evs: the events of a BatchPlan
// to apply whose inbox rows tx has just inserted, that is, those not
// applied before (each event id once, in stream order within an order).
// It follows HandlerFunc's contract for tx, which it must not commit. When
// it returns an error and evs holds more than one event, the transaction
// rolls back and each event is applied again alone, in a transaction of
// its own, so that the error settles only the event that causes it.
type ApplyFunc func(ctx context.Context, tx pgx.Tx, evs []outbox.Envelope) error

// ErrNoEffect, in BatchPlan.Errs (as filepath.SkipDir is returned to
// filepath.Walk), says an event has nothing to apply: its message is acked
// without a transaction and without an inbox row.
//
// That is safe because the inbox guards an effect against being applied
// twice, and the event had none. A redelivery (a lost ack, the same event
// id again) is planned afresh: it finds nothing to apply again, or, if
// what the BatchFunc read changed in between, applies the event once, as
// a first delivery would have. Whatever makes an event's effect depend on
// state read before the transaction is the BatchFunc's to state.
var ErrNoEffect = errors.New("nothing to apply")

// NewBatch returns the consumer cfg describes, applying f to each batch:
// f's read runs before the transaction, the ApplyFunc it returns inside it.
// Like New, it does not touch the server, and returns an error naming
// every invalid field of cfg.
func NewBatch(pool *pgxpool.Pool, js jetstream.JetStream, cfg Config, f BatchFunc) (*Consumer, error) {
	if f == nil {
		return nil, errors.New("consumers.NewBatch: pool, js and batch func are required")
	}
	return newConsumer(pool, js, cfg, nil, nil, f)
}
