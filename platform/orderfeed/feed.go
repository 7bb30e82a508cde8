// Package orderfeed tells an API process's order event streams what
// happened to their order, so that a stream shows a change from the event
// of the change itself instead of reading its order every few hundred
// milliseconds, or on every event.
//
// A Feed follows one purchase cell's order events on the bus with an
// ordered JetStream consumer (no durable state, each process its own) and
// hands each event, as published (its envelope: the order, the type, when
// it occurred, the payload), to the watchers of the event's order. What
// an event says of its order is the order's owner's to read
// (purchase.OrderChangeOf): the feed only routes it. Every order status
// change commits an order event to the outbox in its own transaction, and
// the relay publishes it after the commit, so an event is delivered after
// the change it describes is readable.
//
// It routes a waitlist entry's events (WaitlistOffered, aggregate
// waitlist_entry) the same way, to the watchers of the entry: the entry's
// event stream, which tells its buyer of an offer as it is made.
//
// Only the events that can change what a stream shows are delivered
// (effectOf): those committed in the transaction of an order status change
// or of the payment row that names the order's PaymentIntent, and those
// after which a consumer changes the status without an event of its own
// (PaymentFailed, PaymentRefunded), which come with a follow-up
// (Event.FollowUp). The commands and provider facts of a purchase that
// change neither (HoldCreated, PaymentAuthorizationRequested,
// PaymentAuthorized, CaptureRequested, PaymentCaptured,
// AuthorizationCanceled) are not even sent to the process: the feed's
// consumer names the order event types it follows (Follows), so the
// server delivers four of a ticketed purchase's nine events to each API
// process, not nine. An order event type of outbox.OrderTypes that
// effectOf does not name is followed, so that a type added to the
// product is never missed. One this build does not know at all (a newer
// writer's, during a rolling deploy) is not sent to it: its streams show
// that change at their next read, at the latest the safety read
// (handlers.Config.OrderStreamSafetyRead, a minute by default).
//
// Guarantees:
//   - While Healthy, every order event published to the cell's stream
//     after Run started that can change what a stream shows is delivered
//     to the watchers of its order, in stream order, once the ordered
//     consumer has it.
//   - When the feed stops being healthy (the connection to NATS is lost,
//     the consumer cannot be created or keeps failing), when it becomes
//     healthy again, and when the ordered consumer was reset, every
//     watcher is told it may have missed events (Watcher.Take), so that
//     it reads its order and, while the feed is not healthy, falls back to
//     reading on its own schedule. So is a watcher that let more than
//     maxPending events wait. A watcher is never left waiting on a feed
//     that cannot tell it anything.
package orderfeed

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"boxoffice/platform/bus"
	"boxoffice/platform/outbox"
)

// Config configures a Feed.
type Config struct {
	// JetStream is the connection to the cell's bus. Required.
	JetStream jetstream.JetStream
	// Bus is the cell's namespace. Defaults to the default cell's.
	Bus bus.Namespace
	// Logger logs the feed's failures. Required.
	Logger *slog.Logger
	// CheckInterval is how often the feed checks its connection and
	// consumer. Defaults to 1s.
	CheckInterval time.Duration
}

// Feed delivers to the watchers of each order the events about the order
// published. Its zero value is not usable: use New.
type Feed struct {
	cfg    Config
	logger *slog.Logger

	// handled counts the order events the consumer delivered.
	handled atomic.Uint64

	mu       sync.Mutex
	watchers map[uuid.UUID]map[*Watcher]struct{}
	all      map[*Watcher]struct{}
	healthy  bool
}

// Event is one order event, as delivered to the watchers of its order.
type Event struct {
	// Envelope is the event as published.
	Envelope outbox.Envelope
	// FollowUp is set for an event that a consumer applies next, possibly
	// changing the order's status with no event of its own
	// (PaymentFailed, PaymentRefunded): the watcher should read again a
	// few times over the next seconds.
	FollowUp bool
}

// maxPending is how many events a watcher keeps for its reader: more are
// dropped and the watcher reports it missed some (Take). A purchase has
// four that reach a watcher, each some time after the one before.
const maxPending = 32

// Watcher is one watch of an order (Feed.Watch).
type Watcher struct {
	// C receives a value when events of the order were delivered or the
	// watcher may have missed some (Take). Signals that come while one is
	// pending are merged into it.
	C <-chan struct{}

	feed  *Feed
	order uuid.UUID
	wake  chan struct{}

	mu      sync.Mutex
	pending []Event
	missed  bool
}

// Take returns the events of the order delivered since the last call, in
// stream order, and whether the watcher may have missed events since then
// (the feed's health changed, its consumer was reset, or more than
// maxPending waited): its reader must then read the order to know it.
// Call it after receiving from C.
func (w *Watcher) Take() (events []Event, missed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	events, missed = w.pending, w.missed
	w.pending, w.missed = nil, false
	return events, missed
}

// deliver queues ev for the reader and signals it.
func (w *Watcher) deliver(ev Event) {
	w.mu.Lock()
	if len(w.pending) < maxPending {
		w.pending = append(w.pending, ev)
	} else {
		w.missed = true
	}
	w.mu.Unlock()
	w.signal()
}

// miss tells the reader it may have missed events, and signals it.
func (w *Watcher) miss() {
	w.mu.Lock()
	w.missed = true
	w.mu.Unlock()
	w.signal()
}

func (w *Watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default: // one is pending: it covers this one
	}
}

// Stop ends the watch. C is not closed. It may be called more than once.
func (w *Watcher) Stop() {
	f := w.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.all, w)
	if ws := f.watchers[w.order]; ws != nil {
		delete(ws, w)
		if len(ws) == 0 {
			delete(f.watchers, w.order)
		}
	}
}

// effect is what an order event means for the streams showing its order.
type effect int

const (
	// effectNone: the event is committed with no change a stream shows.
	effectNone effect = iota
	// effectChanged: the event may be committed with a change of the
	// order's status or of the PaymentIntent its payment row names.
	effectChanged
	// effectFollowUp: a consumer applies the event next and may change
	// the order's status without writing an event of its own.
	effectFollowUp
)

// effectOf classifies an order event by the transactions that write it
// (purchase/, payments/, consumers/, tickets/, reconcile/):
//
//   - PaymentIntentCreated: with the payments row of the intent (the
//     stream's payment event).
//   - OrderConfirmed (with CaptureRequested): pending_payment →
//     capture_pending.
//   - TicketIssueRequested: capture_pending → paid, by the saga; the
//     reconciler's repair writes it alone, for an order paid already.
//   - TicketIssued: paid → ticketed.
//   - OrderCanceled: pending_payment → canceled.
//   - HoldExpired: pending_payment → failed (expiry, late authorization).
//   - RefundRequested: paid/ticketed/failed/canceled → refunding.
//   - AuthorizationCancelRequested: written with the release of an order
//     (with OrderCanceled or HoldExpired, delivered already), and the
//     only event of the saga's pending_payment → failed of an order whose
//     hold is no longer active, and of some PaymentFailed steps.
//   - PaymentFailed, PaymentRefunded: written by the provider ingress and
//     the payments worker with no order change; the saga's step on them
//     fails the order (with no event when there is no intent to cancel)
//     or makes it refunded (never with an event).
//
// The rest are commands to the payments worker and provider facts whose
// saga steps write an event of their own when they change the status.
// An unknown type may change the order: it is delivered.
func effectOf(eventType string) effect {
	switch eventType {
	case outbox.TypeHoldCreated, outbox.TypePaymentAuthorizationRequested, outbox.TypePaymentAuthorized,
		outbox.TypeCaptureRequested, outbox.TypePaymentCaptured, outbox.TypeAuthorizationCanceled:
		return effectNone
	case outbox.TypePaymentFailed, outbox.TypePaymentRefunded:
		return effectFollowUp
	}
	return effectChanged
}

// Follows reports whether the feed follows the order events of
// eventType: those that can change what a stream shows (effectOf). The
// others the bus does not send it.
func Follows(eventType string) bool { return effectOf(eventType) != effectNone }

// subjects are the subjects of the feed's consumer in namespace ns: each
// order event type it follows, named one by one, and every event of a
// waitlist entry.
func subjects(ns bus.Namespace) []string {
	var s []string
	for _, t := range outbox.OrderTypes {
		if Follows(t) {
			s = append(s, ns.Subject(bus.Subject(outbox.AggregateOrder, t)))
		}
	}
	return append(s, ns.Subject(bus.Subject(outbox.AggregateWaitlistEntry, ">")))
}

// New returns a feed for cfg; Run makes it follow the bus.
func New(cfg Config) *Feed {
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = time.Second
	}
	return &Feed{
		cfg: cfg, logger: cfg.Logger.With("component", "orderfeed", "cell", cfg.Bus.Cell()),
		watchers: map[uuid.UUID]map[*Watcher]struct{}{}, all: map[*Watcher]struct{}{},
	}
}

// Watch starts a watch of order: the order's events published from now
// on are delivered to it, once the feed's consumer has them (Take). Stop
// it when done.
func (f *Feed) Watch(order uuid.UUID) *Watcher {
	wake := make(chan struct{}, 1)
	w := &Watcher{C: wake, feed: f, order: order, wake: wake}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.watchers[order] == nil {
		f.watchers[order] = map[*Watcher]struct{}{}
	}
	f.watchers[order][w] = struct{}{}
	f.all[w] = struct{}{}
	return w
}

// Healthy reports whether the feed follows the bus now: while it does
// not, watchers must read on their own schedule.
func (f *Feed) Healthy() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.healthy
}

// Handled is how many order events the feed has been delivered since it
// was created, whether or not any watcher got them: once it has counted
// an event, that event (and every event before it on the stream) has been
// delivered to the watchers of its order.
func (f *Feed) Handled() uint64 { return f.handled.Load() }

// Watching is how many watches are open.
func (f *Feed) Watching() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.all)
}

func (f *Feed) setHealthy(healthy bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.healthy == healthy {
		return
	}
	f.healthy = healthy
	f.missAllLocked()
}

// deliver hands ev to the watchers of its order.
func (f *Feed) deliver(ev Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for w := range f.watchers[ev.Envelope.AggregateID] {
		w.deliver(ev)
	}
}

// Run follows the cell's order events until ctx is done. It never fails
// for a bus that is down: it reports unhealthy and tries again.
func (f *Feed) Run(ctx context.Context) error {
	defer f.setHealthy(false)
	check := time.NewTicker(f.cfg.CheckInterval)
	defer check.Stop()
	var cc jetstream.ConsumeContext
	defer func() {
		if cc != nil {
			cc.Stop()
		}
	}()
	failed := make(chan struct{}, 1)
	warned := false // one warning per outage, not one a second
	for {
		connected := f.cfg.JetStream.Conn().Status() == nats.CONNECTED
		if cc == nil && connected {
			var err error
			if cc, err = f.consume(ctx, failed); err != nil {
				if ctx.Err() == nil && !warned {
					f.logger.WarnContext(ctx, "order feed cannot follow the bus; streams read on their own", "error", err.Error())
					warned = true
				}
				cc = nil
			} else if warned {
				f.logger.InfoContext(ctx, "order feed follows the bus again")
				warned = false
			}
		}
		f.setHealthy(cc != nil && connected)
		select {
		case <-ctx.Done():
			return nil
		case <-failed:
			if cc != nil {
				cc.Stop()
				cc = nil
			}
			f.setHealthy(false)
		case <-check.C:
		}
	}
}

// consume starts an ordered consumer of the cell's order events from now
// on. A consumer error that the ordered consumer does not recover from by
// itself is sent on failed.
func (f *Feed) consume(ctx context.Context, failed chan<- struct{}) (jetstream.ConsumeContext, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cons, err := f.cfg.JetStream.OrderedConsumer(cctx, f.cfg.Bus.Stream(), jetstream.OrderedConsumerConfig{
		FilterSubjects:    subjects(f.cfg.Bus),
		DeliverPolicy:     jetstream.DeliverNewPolicy,
		InactiveThreshold: time.Minute,
	})
	if err != nil {
		return nil, err
	}
	return cons.Consume(f.handle, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		f.logger.WarnContext(ctx, "order feed consumer error", "error", err.Error())
		if errors.Is(err, jetstream.ErrOrderedConsumerReset) {
			// It recreates itself from the last message it delivered; what
			// happened meanwhile is read by every watcher now.
			f.missAll()
		}
		if isFatal(err) {
			select {
			case failed <- struct{}{}:
			default:
			}
		}
	}))
}

// handle delivers msg to its order's watchers unless its event changes
// no order (effectNone). The consumer's subjects leave those out; should
// one come all the same, it is passed over without decoding its
// envelope, by its type: its subject's last token
// (outbox.Envelope.Subject, which the relay publishes on).
func (f *Feed) handle(msg jetstream.Msg) {
	defer f.handled.Add(1)
	if effectOf(subjectType(msg.Subject())) == effectNone {
		return
	}
	var env outbox.Envelope
	if err := json.Unmarshal(msg.Data(), &env); err == nil && env.AggregateID != uuid.Nil {
		if e := effectOf(env.EventType); e != effectNone {
			f.deliver(Event{Envelope: env, FollowUp: e == effectFollowUp})
		}
	}
}

// subjectType is the event type a subject names: its last token
// (ticketing.<aggregate>.<event_type>, in any namespace).
func subjectType(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}

// isFatal reports whether a consume error ends the ordered consumer's
// delivery until it is created again (the others it recovers from).
func isFatal(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound)
}

func (f *Feed) missAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.missAllLocked()
}

// missAllLocked tells every watcher it may have missed events; with f.mu
// held.
func (f *Feed) missAllLocked() {
	for w := range f.all {
		w.miss()
	}
}
