// Package outbox defines the envelope of every domain event and how it is
// written to the transactional outbox. Events are only ever written in the
// same transaction as the state change they describe; the relay is the only
// publisher.
//
// It owns, as their one writer, the outbox, outbox_leases and
// outbox_history tables: Insert for every writer of events (hold_reserve
// excepted, which writes the hold's first events and their history rows
// in its own statement), and Claim, Settle and ReadStats for the relay.
// outbox_history is what an order's timeline keeps of each event after
// the relay deleted its outbox row (docs/timeline.md); retention
// (ops/retention) bounds it.
package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/platform/bus"
	"boxoffice/platform/db"
	"boxoffice/platform/telemetry"
	"boxoffice/sqlcgen"
)

// Event types of the purchase saga (docs/design/outbox.md). Payloads are the
// structs of the same name in events.go.
const (
	TypeHoldCreated                   = "HoldCreated"
	TypePaymentAuthorizationRequested = "PaymentAuthorizationRequested"
	TypePaymentIntentCreated          = "PaymentIntentCreated"
	TypePaymentAuthorized             = "PaymentAuthorized"
	TypePaymentFailed                 = "PaymentFailed"
	TypeOrderConfirmed                = "OrderConfirmed"
	TypeCaptureRequested              = "CaptureRequested"
	TypePaymentCaptured               = "PaymentCaptured"
	TypeTicketIssueRequested          = "TicketIssueRequested"
	TypeTicketIssued                  = "TicketIssued"
	TypeHoldExpired                   = "HoldExpired"
	TypeAuthorizationCancelRequested  = "AuthorizationCancelRequested"
	TypeAuthorizationCanceled         = "AuthorizationCanceled"
	TypeRefundRequested               = "RefundRequested"
	TypePaymentRefunded               = "PaymentRefunded"
	TypeOrderCanceled                 = "OrderCanceled"
)

// OrderTypes are the event types of AggregateOrder, every one of the
// constants above: what a consumer that names the order events it reads
// one by one chooses from (TestOrderTypesListsEveryOrderType).
var OrderTypes = []string{
	TypeHoldCreated, TypePaymentAuthorizationRequested, TypePaymentIntentCreated, TypePaymentAuthorized,
	TypePaymentFailed, TypeOrderConfirmed, TypeCaptureRequested, TypePaymentCaptured,
	TypeTicketIssueRequested, TypeTicketIssued, TypeHoldExpired, TypeAuthorizationCancelRequested,
	TypeAuthorizationCanceled, TypeRefundRequested, TypePaymentRefunded, TypeOrderCanceled,
}

// Event types of other aggregates: the organizer released blocked seats
// of an event (aggregate AggregateEvent), a waitlist entry was offered
// seats (aggregate AggregateWaitlistEntry). Payloads are the structs of
// the same name in events.go.
const (
	TypeSeatsReleased   = "SeatsReleased"
	TypeWaitlistOffered = "WaitlistOffered"
)

// SchemaVersion is the envelope's version. Compatible changes add fields
// within a version; consumers ignore fields they do not know.
const SchemaVersion = 1

// AggregateOrder is the aggregate every purchase event belongs to.
const AggregateOrder = "order"

// AggregateEvent is the aggregate of facts about an event's seats as a
// whole (SeatsReleased); AggregateWaitlistEntry that of a waitlist
// entry's facts (WaitlistOffered).
const (
	AggregateEvent         = "event"
	AggregateWaitlistEntry = "waitlist_entry"
)

// Envelope is the JSON form of an event on the bus. EventID is also the
// Nats-Msg-Id, so the stream dedupes a republished row.
type Envelope struct {
	EventID       uuid.UUID `json:"event_id"`
	EventType     string    `json:"event_type"`
	SchemaVersion int       `json:"schema_version"`
	AggregateType string    `json:"aggregate_type"`
	AggregateID   uuid.UUID `json:"aggregate_id"`
	OccurredAt    time.Time `json:"occurred_at"`
	CorrelationID string    `json:"correlation_id"`
	CausationID   string    `json:"causation_id,omitempty"`
	// AppliedBy names the durable consumer whose effect of this event was
	// written in the transaction that wrote the event (the payment
	// ingress applies the saga's step as it records a provider webhook):
	// that consumer acks it with no transaction and no inbox row. Every
	// other consumer reads it as any event.
	AppliedBy string          `json:"applied_by,omitempty"`
	Payload   json.RawMessage `json:"payload"`
	// TraceParent is the W3C traceparent of the span that handles this
	// delivery of the event (tracing on), set by the consumer runtime for
	// what a consumer stores to be continued later (a webhook message).
	// It is never part of the JSON form: the trace travels in the
	// message's header.
	TraceParent string `json:"-"`
}

// Subject is the JetStream subject the event is published on:
// ticketing.<aggregate>.<event_type>.
func (e Envelope) Subject() string {
	return bus.Subject(e.AggregateType, e.EventType)
}

// NewOrderEvent builds the envelope of an order event with a fresh,
// time-ordered event id. payload must never carry secrets: no client
// secrets, tokens or card data.
func NewOrderEvent(eventType string, orderID uuid.UUID, occurredAt time.Time, correlationID, causationID string, payload any) (Envelope, []byte, error) {
	return NewEvent(AggregateOrder, eventType, orderID, occurredAt, correlationID, causationID, payload)
}

// NewEvent is NewOrderEvent for an event of any aggregate type.
func NewEvent(aggregateType, eventType string, aggregateID uuid.UUID, occurredAt time.Time, correlationID, causationID string, payload any) (Envelope, []byte, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return Envelope{}, nil, fmt.Errorf("marshal %s payload: %w", eventType, err)
	}
	env := Envelope{
		EventID:       uuid.Must(uuid.NewV7()),
		EventType:     eventType,
		SchemaVersion: SchemaVersion,
		AggregateType: aggregateType,
		AggregateID:   aggregateID,
		OccurredAt:    occurredAt.UTC(),
		CorrelationID: correlationID,
		CausationID:   causationID,
		Payload:       raw,
	}
	b, err := json.Marshal(env)
	if err != nil {
		return Envelope{}, nil, fmt.Errorf("marshal %s envelope: %w", eventType, err)
	}
	return env, b, nil
}

// HoldCreated is the payload of TypeHoldCreated.
type HoldCreated struct {
	OrderID     uuid.UUID   `json:"order_id"`
	HoldID      uuid.UUID   `json:"hold_id"`
	EventID     uuid.UUID   `json:"event_id"`
	UserID      uuid.UUID   `json:"user_id"`
	SeatIDs     []uuid.UUID `json:"seat_ids"`
	AmountMinor int64       `json:"amount_minor"`
	Currency    string      `json:"currency"`
	ExpiresAt   time.Time   `json:"expires_at"`
}

// Insert writes env (raw is its JSON form from NewOrderEvent) to the outbox
// on db, with the traceparent of ctx's span when tracing is on (the relay
// publishes it with the event); call it in the transaction of the state
// change the event describes. The same statement keeps the event's row of
// outbox_history (its id, order, type, occurred_at, causation and
// AppliedBy), which outlives the outbox row for the order's timeline, for
// as long as retention keeps the inbox.
//
// On a transaction the row is not sent at once but queued (db.Rows) and
// sent with the transaction's COMMIT, together with every other event the
// transaction wrote, as one statement: nothing reads an outbox row back
// in the transaction that writes it, so it costs no round trip of its
// own, and the events of a transaction cost one statement, not one each.
// A failure to write it fails the commit. The rows keep the order in
// which Insert was called, and so do their seqs.
func Insert(ctx context.Context, d sqlcgen.DBTX, env Envelope, raw []byte) error {
	row := sqlcgen.OutboxInsertParams{
		ID: env.EventID, Subject: env.Subject(), EventType: env.EventType, AggregateID: env.AggregateID, Envelope: raw,
		OccurredAt: env.OccurredAt, CausationID: nonEmpty(env.CausationID), AppliedBy: nonEmpty(env.AppliedBy),
		TraceParent: telemetry.StoredParent(ctx),
	}
	var err error
	if tx, ok := d.(pgx.Tx); ok {
		err = outboxRows.Queue(ctx, tx, row)
	} else {
		err = writeRows(ctx, d, []sqlcgen.OutboxInsertParams{row})
	}
	if err != nil {
		return fmt.Errorf("insert %s into outbox: %w", env.EventType, err)
	}
	return nil
}

// outboxRows is the outbox's kind of queued row: a transaction's events.
var outboxRows = &db.Rows[sqlcgen.OutboxInsertParams]{Write: writeRows}

// writeRows writes rows to the outbox and outbox_history: one row with
// OutboxInsert, several with OutboxInsertMany, in one statement either way.
func writeRows(ctx context.Context, d db.DBTX, rows []sqlcgen.OutboxInsertParams) error {
	q := sqlcgen.New()
	if len(rows) == 1 {
		return q.OutboxInsert(ctx, d, rows[0])
	}
	p := sqlcgen.OutboxInsertManyParams{
		Ids: make([]uuid.UUID, len(rows)), Subjects: make([]string, len(rows)), EventTypes: make([]string, len(rows)),
		AggregateIds: make([]uuid.UUID, len(rows)), Envelopes: make([]string, len(rows)), OccurredAts: make([]time.Time, len(rows)),
		CausationIds: make([]string, len(rows)), AppliedBys: make([]string, len(rows)), TraceParents: make([]string, len(rows)),
	}
	for i, r := range rows {
		p.Ids[i], p.Subjects[i], p.EventTypes[i], p.AggregateIds[i] = r.ID, r.Subject, r.EventType, r.AggregateID
		p.Envelopes[i], p.OccurredAts[i] = string(r.Envelope), r.OccurredAt
		p.CausationIds[i], p.AppliedBys[i], p.TraceParents[i] = deref(r.CausationID), deref(r.AppliedBy), deref(r.TraceParent)
	}
	return q.OutboxInsertMany(ctx, d, p)
}

// deref is *s, or "" for nil: OutboxInsertMany's "none".
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// nonEmpty is s, or nil for "" (a NULL column).
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
