package consumers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"boxoffice/platform/db"
	"boxoffice/platform/inbox"
	"boxoffice/platform/outbox"
	"boxoffice/platform/telemetry"
)

// item is one delivery of a batch, from its body to its outcome.
type item struct {
	msg jetstream.Msg
	d   *delivery
	ev  outbox.Envelope
	// handler applies the event: the consumer's HandlerFunc, or what its
	// ExternalFunc returned; nil for a consumer with a BatchFunc, whose
	// ApplyFunc applies the batch's events together.
	handler HandlerFunc
	// o is the delivery's outcome once decided; settled items are not
	// handled further.
	o       outcome
	decided bool
	// span is the delivery's process span when tracing is on and the
	// message carries a trace; nil otherwise.
	span trace.Span
}

// context is ctx with the item's span, for the work done for it alone.
func (it *item) context(ctx context.Context) context.Context {
	if it.span == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, it.span)
}

func (it *item) decide(kind outcomeKind, err error) {
	it.o = outcome{kind: kind, err: err, numDelivered: it.d.numDelivered}
	it.decided = true
}

// handleBatch takes the deliveries of one batch from their bodies to their
// acks:
//
//  1. a body that is not a valid envelope is dead-lettered on its own,
//     and an event applied for this consumer where it was written
//     (Envelope.AppliedBy) is acked on its own;
//  2. for a consumer with an ExternalFunc, one read of the inbox finds the
//     events applied before (acked without a call), and the calls for the
//     others run concurrently, outside any transaction; a failed call
//     settles its own message; for a consumer with a BatchFunc, it runs
//     once for the batch, outside any transaction, and an event it finds
//     an error for, or nothing to apply, is settled without a transaction;
//  3. unless no event is left, one transaction inserts every remaining
//     event's inbox row in one statement, which returns the events not
//     applied before, runs their handlers in stream order (by order id
//     first, so that concurrent batches lock order rows in one order), or
//     the BatchFunc's ApplyFunc once for all of them, and commits;
//  4. every message is settled by the one policy, decide.
//
// When a handler fails, the transaction rolls back, the failing message is
// settled alone with its error, and the others run again in a new
// transaction without it: they commit once, as if it had never been in
// the batch. Handlers must allow this anyway (a transaction that rolled
// back may be run again), so it needs no savepoints on the way that
// succeeds. When an ApplyFunc fails for several events, which one failed
// is not known: each is applied again alone, in its own transaction.
func (c *Consumer) handleBatch(ctx context.Context, msgs []jetstream.Msg) {
	items := make([]*item, 0, len(msgs))
	for _, msg := range msgs {
		d := c.newDelivery(ctx, msg)
		ev, err := decodeEnvelope(msg.Data())
		d.setEvent(ev)
		if err != nil {
			c.settle(ctx, msg, d, outcome{kind: outcomeInvalid, err: err, numDelivered: d.numDelivered})
			continue
		}
		if ev.AppliedBy == c.cfg.Name {
			// Its writer applied it for this consumer in the
			// transaction that wrote it: nothing is left to do.
			c.settle(ctx, msg, d, outcome{kind: outcomeNoEffect, numDelivered: d.numDelivered})
			continue
		}
		items = append(items, &item{msg: msg, d: d, ev: ev, handler: c.handler})
	}
	if len(items) == 0 {
		return
	}
	if telemetry.Enabled() {
		var end func()
		ctx, end = c.startSpans(ctx, items)
		defer end()
	}
	c.metrics.batch.Observe(float64(len(items)))
	start := time.Now()
	stop := c.keepAlive(ctx, items)
	var apply ApplyFunc
	switch {
	case c.external != nil:
		c.callExternals(ctx, items)
	case c.batch != nil:
		apply = c.planBatch(ctx, items)
	}
	c.commit(ctx, items, apply)
	stop()
	elapsed := time.Since(start).Seconds()
	for _, it := range items {
		c.metrics.handler.Observe(elapsed)
		if it.o.kind == outcomeApplied && c.afterCommitFunc != nil && c.afterCommitFunc(it.ev, it.d.numDelivered) {
			continue
		}
		if it.o.kind == outcomeDuplicate {
			c.metrics.duplicates.Inc()
		}
		c.settle(ctx, it.msg, it.d, it.o)
	}
}

// callExternals finds which of the batch's redelivered events the inbox
// holds already (those are duplicates, acked without a call) and makes the
// external call of every other one that is not past its last delivery,
// concurrently (Config.CallConcurrency at most across the process). An item whose call failed is decided; the others get the
// HandlerFunc their call returned.
//
// A first delivery skips the inbox read: it can be applied already only
// when the same event id came twice as two stream messages, and then the
// call is repeated (it is idempotent) and the inbox insert in the
// transaction still makes the second one a duplicate.
func (c *Consumer) callExternals(ctx context.Context, items []*item) {
	var redelivered []*item
	for _, it := range items {
		if it.d.numDelivered > 1 {
			redelivered = append(redelivered, it)
		}
	}
	var applied []uuid.UUID
	if len(redelivered) > 0 {
		var err error
		applied, err = inbox.Applied(ctx, c.pool, c.cfg.Name, eventIDs(redelivered))
		if err != nil {
			err = fmt.Errorf("read inbox rows: %w", err)
			for _, it := range items {
				it.decide(c.classify(ctx, err), err)
			}
			return
		}
	}
	var calls sync.WaitGroup
	for _, it := range items {
		switch {
		case slices.Contains(applied, it.ev.EventID):
			it.decide(outcomeDuplicate, nil)
		case it.d.numDelivered > c.policy.maxDeliver:
			it.decide(outcomeExhausted, errExhausted)
		default:
			calls.Go(func() {
				select {
				case c.calls <- struct{}{}:
					defer func() { <-c.calls }()
				case <-ctx.Done():
					it.decide(outcomeInterrupted, ctx.Err())
					return
				}
				h, err := c.callExternal(it.context(ctx), it.ev)
				if err != nil {
					it.decide(c.classify(ctx, err), err)
					return
				}
				it.handler = h
			})
		}
	}
	calls.Wait()
}

// planBatch runs the consumer's BatchFunc once for the batch's events
// that are not past their last delivery, outside any transaction, and
// decides each event it found an error for, or nothing to apply
// (ErrNoEffect: acked with no transaction and no inbox row). It returns
// the ApplyFunc for the others. A failure of the BatchFunc itself decides
// every event it was given.
func (c *Consumer) planBatch(ctx context.Context, items []*item) ApplyFunc {
	planned := make([]*item, 0, len(items))
	for _, it := range items {
		// One past its last delivery is not planned: the transaction
		// acks it if the inbox holds it, and dead-letters it if not.
		if !it.decided && it.d.numDelivered <= c.policy.maxDeliver {
			planned = append(planned, it)
		}
	}
	if len(planned) == 0 {
		return nil
	}
	evs := make([]outbox.Envelope, len(planned))
	for i, it := range planned {
		evs[i] = it.ev
	}
	plan, err := c.callBatch(ctx, evs)
	if err == nil && plan.Errs != nil && len(plan.Errs) != len(evs) {
		err = fmt.Errorf("batch plan has %d errors for %d events", len(plan.Errs), len(evs))
	}
	if err != nil {
		for _, it := range planned {
			it.decide(c.classify(ctx, err), err)
		}
		return nil
	}
	for i, it := range planned {
		var err error
		if plan.Errs != nil {
			err = plan.Errs[i]
		}
		switch {
		case err == nil:
		case errors.Is(err, ErrNoEffect):
			it.decide(outcomeNoEffect, nil)
		default:
			it.decide(c.classify(ctx, err), err)
		}
	}
	return plan.ApplyFunc
}

// callBatch runs the consumer's BatchFunc; a panic becomes a transient
// error.
func (c *Consumer) callBatch(ctx context.Context, evs []outbox.Envelope) (plan BatchPlan, err error) {
	err = recovering(func() error {
		plan, err = c.batch(ctx, evs)
		return err
	})
	return plan, err
}

// callExternal runs the consumer's ExternalFunc; a panic becomes a
// transient error.
func (c *Consumer) callExternal(ctx context.Context, ev outbox.Envelope) (h HandlerFunc, err error) {
	err = recovering(func() error {
		h, err = c.external(ctx, ev)
		return err
	})
	if h == nil && err == nil {
		h = func(context.Context, pgx.Tx, outbox.Envelope) error { return nil } // only the inbox row
	}
	return h, err
}

// commit applies the undecided items in one transaction, and decides
// each: applied, duplicate (the inbox had it), or the failure of its own
// handler. A failure of the transaction itself (the inbox insert, the
// commit, a shutdown) decides every item still in it. With apply (a
// consumer with a BatchFunc) the items' handlers are not run: apply runs
// once for all the events not applied before, and when it fails for more
// than one item each item is committed again alone.
func (c *Consumer) commit(ctx context.Context, items []*item, apply ApplyFunc) {
	pending := make([]*item, 0, len(items))
	for _, it := range items {
		if !it.decided {
			pending = append(pending, it)
		}
	}
	// Stream order within an order; order ids ascending across orders.
	slices.SortStableFunc(pending, func(a, b *item) int { return bytes.Compare(a.ev.AggregateID[:], b.ev.AggregateID[:]) })
	for len(pending) > 0 {
		var failed *item
		var applyFailed bool
		// last is the handler that ran last: a failed deferred write
		// that names no handler (db.Attribute) is taken for its.
		var last *item
		var fresh map[uuid.UUID]bool
		err := db.WithTx(ctx, c.pool, func(ctx context.Context, tx pgx.Tx) error {
			failed, applyFailed = nil, false
			inserted, err := inbox.Record(ctx, tx, c.cfg.Name, eventIDs(pending))
			if err != nil {
				return fmt.Errorf("insert inbox rows: %w", err)
			}
			fresh = make(map[uuid.UUID]bool, len(inserted))
			for _, id := range inserted {
				fresh[id] = true
			}
			run := make(map[uuid.UUID]bool, len(inserted))
			var evs []outbox.Envelope // for apply
			last = nil
			for _, it := range pending {
				id := it.ev.EventID
				if !fresh[id] || run[id] { // applied before, or twice in this batch
					continue
				}
				run[id] = true
				if it.d.numDelivered > c.policy.maxDeliver {
					failed = it
					return errExhausted
				}
				if c.batch != nil {
					evs = append(evs, it.ev)
					continue
				}
				// The writes a handler defers are its own: they go with
				// a later statement (the next handler's, or the COMMIT),
				// whose failure then names the handler that deferred
				// them (db.Attribute), with no round trip of their own.
				db.Attribute(tx, it)
				last = it
				if err := c.callHandler(it.context(ctx), tx, it.handler, it.ev); err != nil {
					failed = deferredBy(err, it)
					return err
				}
			}
			if len(evs) > 0 {
				if err := c.callApply(ctx, tx, apply, evs); err != nil {
					applyFailed = true
					return err
				}
			}
			return nil
		})
		if errors.Is(err, db.ErrDeferredWrite) && failed == nil && !applyFailed {
			if c.batch != nil {
				applyFailed = true
			} else if last != nil {
				failed = deferredBy(err, last)
			}
		}
		switch {
		case err == nil:
			run := make(map[uuid.UUID]bool, len(fresh))
			for _, it := range pending {
				if id := it.ev.EventID; fresh[id] && !run[id] {
					run[id] = true
					it.decide(outcomeApplied, nil)
				} else {
					it.decide(outcomeDuplicate, nil)
				}
			}
			return
		case ctx.Err() != nil || (failed == nil && !applyFailed):
			for _, it := range pending {
				it.decide(c.classify(ctx, err), err)
			}
			return
		case applyFailed && len(pending) > 1:
			// One statement applied them all: which event made it fail is
			// not known. Each alone, so that only that one fails.
			for _, it := range pending {
				c.commit(ctx, []*item{it}, apply)
			}
			return
		case applyFailed:
			pending[0].decide(c.classify(ctx, err), err)
			return
		default:
			failed.decide(c.classify(ctx, err), err)
			pending = slices.DeleteFunc(pending, func(it *item) bool { return it == failed })
		}
	}
}

// deferredBy is the item whose deferred write err is the failure of
// (db.Attribute), or it when err is not one: a handler's statement can
// fail on the writes the handler before it deferred, and the COMMIT on
// any handler's.
func deferredBy(err error, it *item) *item {
	var dw *db.DeferredWriteError
	if errors.As(err, &dw) {
		if owner, ok := dw.Unit.(*item); ok {
			return owner
		}
	}
	return it
}

// callApply runs a BatchFunc's ApplyFunc (nil: nothing but the inbox
// rows), turning a panic into a transient error.
func (c *Consumer) callApply(ctx context.Context, tx pgx.Tx, apply ApplyFunc, evs []outbox.Envelope) error {
	if apply == nil {
		return nil
	}
	return recovering(func() error { return apply(ctx, tx, evs) })
}

// callHandler runs the handler, turning a panic into a transient error so
// the transaction rolls back and the message is retried.
func (c *Consumer) callHandler(ctx context.Context, tx pgx.Tx, h HandlerFunc, ev outbox.Envelope) error {
	if h == nil {
		return nil
	}
	return recovering(func() error { return h(ctx, tx, ev) })
}

// recovering runs fn, turning a panic in it into a transient error (a
// panicError, with the panic's stack) rather than letting it take the
// consumer down: the one place a consumer's code is recovered.
func recovering(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = newPanicError(v)
		}
	}()
	return fn()
}

// classify names the outcome of a failed delivery by its error.
func (c *Consumer) classify(ctx context.Context, err error) outcomeKind {
	switch {
	case errors.Is(err, errExhausted):
		return outcomeExhausted
	case ctx.Err() != nil:
		// Shutdown canceled the handler: whatever it returned, it did not
		// get to finish.
		return outcomeInterrupted
	case errors.Is(err, ErrPermanent):
		return outcomePermanent
	default:
		return outcomeTransient
	}
}

func eventIDs(items []*item) []uuid.UUID {
	ids := make([]uuid.UUID, len(items))
	for i, it := range items {
		ids[i] = it.ev.EventID
	}
	return ids
}
