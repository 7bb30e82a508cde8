package webhooks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"boxoffice/platform/bus"
	"boxoffice/platform/fault"
	"boxoffice/platform/outbox"
	"boxoffice/platform/telemetry"
	"boxoffice/sqlcgen"
)

// FanOutSubjects are the subjects the fan-out reads: the domain events
// that become public facts. They are in default terms; the consumer
// runtime maps them into its namespace (consumers.Config.Bus).
var FanOutSubjects = bus.Subjects(outbox.AggregateOrder, sourceTypes...)

// ErrNothingToSend is FanOutPlan.Err's answer for an event that stands for
// no fact an enabled endpoint of its organizer subscribes to (or for no
// fact at all): there is nothing to store for it, and nothing to record.
var ErrNothingToSend = errors.New("no endpoint subscribes to what the event stands for")

// FanOut is the fan-out, run by the consumer runtime as the durable
// consumer consumers.NewWebhooksFanOut (the runtime lives in package
// consumers, which imports this one; this package never imports it). It
// turns the domain events that are public facts into one immutable
// message per (organizer, fact), its bytes fixed once, and one pending
// delivery per enabled endpoint of the order's organizer that subscribes
// to the fact's type, a whole batch of events at a time in two statements
// whatever the batch's size:
//
//   - Plan, before any transaction, reads the batch's orders and what
//     their organizers' enabled endpoints subscribe to, in one statement,
//     and decides each event: ErrNothingToSend when no such endpoint
//     subscribes to a type the event may become (the common case: an
//     organizer with no endpoint), a permanent error (fault.Permanent) for
//     an unknown order or a payload that does not decode, a transient one
//     for a fact the saga has not applied to the order yet; otherwise the
//     messages to store, encoded.
//   - FanOutPlan.Store, in the transaction that records the events in the
//     inbox, inserts their messages and deliveries in one statement. The
//     message's unique (organizer, source key) makes a fact that arrives
//     twice by another path (an expiry, then a late decline) one message.
//
// An event with nothing to send needs no transaction and no inbox row,
// and the consumer acks it at once. The inbox guards an effect against
// being applied twice, and such an event had none: a redelivery plans it
// afresh and finds nothing again or, if an endpoint subscribed in
// between, stores its facts once, as a first delivery would have.
//
// Which endpoints get an event: Plan reads the endpoints after the event's
// transaction committed (the relay publishes only committed events), so
// it sees every endpoint created, enabled or re-filtered before that
// commit. An endpoint therefore gets every fact whose domain event
// committed after the endpoint's creation (or the change that made it
// subscribe) did, as long as it is still enabled and subscribed when
// Store runs. An endpoint that subscribes while an event is on its way —
// after the event committed — may or may not get it: when Plan saw no
// subscriber the event is acked with nothing stored, and when it saw one
// Store joins the endpoints as they are then. This is what the fan-out
// promised when it read the endpoints in the inbox transaction
// (docs/webhooks.md, "When a new endpoint starts receiving"). No cache
// stands in for the read: a cached "nobody subscribes" would have to be
// invalidated before the next event is planned, and nothing orders an
// invalidation (a NOTIFY, a bus message) before an event the relay
// publishes on another path; the read costs one round trip per batch.
type FanOut struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
}

// NewFanOut returns the fan-out over pool. Panics without a pool or a
// logger (a programmer error).
func NewFanOut(pool *pgxpool.Pool, logger *slog.Logger) *FanOut {
	if pool == nil || logger == nil {
		panic("webhooks.NewFanOut: pool and logger are required")
	}
	return &FanOut{pool: pool, logger: logger.With("component", "webhooks_fanout")}
}

// Plan reads, in one statement outside any transaction, the orders of evs
// and what their organizers' enabled endpoints subscribe to, and returns
// what each event needs (FanOutPlan.Err) and the messages to store for
// the others. An error is the read's, and concerns every event.
func (f *FanOut) Plan(ctx context.Context, evs []outbox.Envelope) (*FanOutPlan, error) {
	return plan(ctx, f.pool, f.logger, evs)
}

// FanOutHandler is the fan-out of one event in the caller's transaction:
// FanOut's plan and store for a batch of one, both through tx. The
// consumer uses FanOut, which reads before any transaction and stores a
// batch at once; this is for callers that hold a transaction already.
// Nothing to send is a nil error; the other errors are FanOutPlan.Err's.
func FanOutHandler(logger *slog.Logger) func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
	logger = logger.With("component", "webhooks_fanout")
	return func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
		p, err := plan(ctx, tx, logger, []outbox.Envelope{ev})
		if err != nil {
			return err
		}
		switch err := p.Err(0); {
		case errors.Is(err, ErrNothingToSend):
			return nil
		case err != nil:
			return err
		}
		return p.Store(ctx, tx, []uuid.UUID{ev.EventID})
	}
}

// FanOutPlan is what Plan decided about a batch of events.
type FanOutPlan struct {
	logger *slog.Logger
	errs   []error
	// messages are the messages to store for each event, by event id.
	messages map[uuid.UUID][]plannedMessage
}

// plannedMessage is one message to store, encoded, and what its log line
// names.
type plannedMessage struct {
	id          uuid.UUID
	organizerID uuid.UUID
	eventType   string
	payload     []byte
	sourceKey   string
	ev          outbox.Envelope
}

// orderSubject is what the fan-out knows of an order when it plans: the
// order, and what its organizer's enabled endpoints subscribe to.
type orderSubject struct {
	eventID     uuid.UUID
	organizerID uuid.UUID
	status      string
	amountMinor int64
	currency    string
	// allTypes: an endpoint's filter is empty, which means every event
	// type; types: what the other filters name.
	allTypes bool
	types    []string
}

// subscribes reports whether an enabled endpoint of the order's organizer
// subscribes to the public event type t.
func (o orderSubject) subscribes(t string) bool {
	return (o.allTypes && IsEventType(t)) || slices.Contains(o.types, t)
}

// plan is Plan through q, a pool or a transaction.
func plan(ctx context.Context, q sqlcgen.DBTX, logger *slog.Logger, evs []outbox.Envelope) (*FanOutPlan, error) {
	p := &FanOutPlan{logger: logger, errs: make([]error, len(evs)), messages: map[uuid.UUID][]plannedMessage{}}
	var orderIDs []uuid.UUID
	for i, ev := range evs {
		switch {
		case !isSource(ev.EventType):
			p.errs[i] = ErrNothingToSend
		case !slices.Contains(orderIDs, ev.AggregateID):
			orderIDs = append(orderIDs, ev.AggregateID)
		}
	}
	if len(orderIDs) == 0 {
		return p, nil
	}
	rows, err := sqlcgen.New().WebhookFanOutSubjects(ctx, q, orderIDs)
	if err != nil {
		return nil, fmt.Errorf("read orders and their endpoints: %w", err)
	}
	orders := make(map[uuid.UUID]orderSubject, len(rows))
	for _, r := range rows {
		orders[r.OrderID] = orderSubject{
			eventID: r.EventID, organizerID: r.OrganizerID, status: r.Status, amountMinor: r.AmountMinor,
			currency: r.Currency, allTypes: r.AllTypes, types: r.EventTypes,
		}
	}
	for i, ev := range evs {
		if p.errs[i] != nil {
			continue
		}
		msgs, err := planEvent(ev, orders)
		if err != nil {
			p.errs[i] = err
			continue
		}
		p.messages[ev.EventID] = msgs
	}
	return p, nil
}

// planEvent returns the messages ev stands for, or why there are none.
func planEvent(ev outbox.Envelope, orders map[uuid.UUID]orderSubject) ([]plannedMessage, error) {
	order, ok := orders[ev.AggregateID]
	if !ok {
		return nil, fault.Permanent(fmt.Errorf("%s names an unknown order", ev.EventType))
	}
	// Nobody to tell: decided before the payload is decoded, and before
	// waiting for the saga, which could not change it.
	if !slices.ContainsFunc(sourceFor[ev.EventType], order.subscribes) {
		return nil, ErrNothingToSend
	}
	facts, err := factsOf(ev, order)
	switch {
	case errors.Is(err, errUndecodable):
		return nil, fault.Permanent(err)
	case err != nil:
		return nil, err
	}
	var msgs []plannedMessage
	for _, f := range facts {
		if !order.subscribes(f.eventType) {
			continue
		}
		body, err := encodeBody(f.eventType, ev.OccurredAt, f.data)
		if err != nil {
			return nil, fault.Permanent(err)
		}
		msgs = append(msgs, plannedMessage{
			id: uuid.Must(uuid.NewV7()), organizerID: order.organizerID, eventType: f.eventType,
			payload: body, sourceKey: f.sourceKey, ev: ev,
		})
	}
	if len(msgs) == 0 {
		return nil, ErrNothingToSend
	}
	return msgs, nil
}

// Err is what the i-th event of the batch needs: nil when it has messages
// to store (Store), ErrNothingToSend when it has none, or the error that
// settles it: one wrapping fault.ErrPermanent (an unknown order, a
// payload that does not decode), or a transient one (the saga has not
// applied a payment failure or a full refund to the order yet).
func (p *FanOutPlan) Err(i int) error { return p.errs[i] }

// Store stores in tx, in one statement, the messages of the events
// eventIDs names and their deliveries: one per enabled endpoint of the
// message's organizer that subscribes to its type, as the endpoints are
// in tx. Events without messages are left out; of two facts of the batch
// with one source key (an expiry and a decline that both fail the order)
// the first in eventIDs' order is stored, and a fact stored before is
// not stored again. Call it in the transaction that records eventIDs in
// the inbox, for the events the inbox had not recorded before.
func (p *FanOutPlan) Store(ctx context.Context, tx pgx.Tx, eventIDs []uuid.UUID) error {
	type key struct {
		organizerID uuid.UUID
		sourceKey   string
	}
	var arg sqlcgen.WebhookFanOutStoreParams
	traced := telemetry.Enabled()
	seen := map[key]bool{}
	stored := map[uuid.UUID]plannedMessage{}
	for _, id := range eventIDs {
		for _, m := range p.messages[id] {
			k := key{m.organizerID, m.sourceKey}
			if seen[k] {
				continue
			}
			seen[k] = true
			stored[m.id] = m
			arg.Ids = append(arg.Ids, m.id)
			arg.OrganizerIds = append(arg.OrganizerIds, m.organizerID)
			arg.EventTypes = append(arg.EventTypes, m.eventType)
			arg.Payloads = append(arg.Payloads, m.payload)
			arg.SourceKeys = append(arg.SourceKeys, m.sourceKey)
			arg.OrderIds = append(arg.OrderIds, m.ev.AggregateID)
			arg.CorrelationIds = append(arg.CorrelationIds, m.ev.CorrelationID)
			arg.CreatedAts = append(arg.CreatedAts, m.ev.OccurredAt)
			if traced { // one element per message, or none at all
				arg.TraceParents = append(arg.TraceParents, m.ev.TraceParent)
			}
		}
	}
	if len(arg.Ids) == 0 {
		return nil
	}
	rows, err := sqlcgen.New().WebhookFanOutStore(ctx, tx, arg)
	if err != nil {
		return fmt.Errorf("store webhook messages: %w", err)
	}
	for _, r := range rows {
		m := stored[r.ID]
		p.logger.InfoContext(ctx, "webhook message stored",
			"msg_id", MessageID(r.ID), "type", m.eventType, "order_id", m.ev.AggregateID.String(),
			"organizer_id", m.organizerID.String(), "deliveries", r.Deliveries,
			"correlation_id", m.ev.CorrelationID, "causation_id", m.ev.EventID.String())
	}
	return nil
}

func isSource(t string) bool { return slices.Contains(sourceTypes, t) }
