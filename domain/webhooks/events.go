package webhooks

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"boxoffice/domain/purchase"
	"boxoffice/platform/outbox"
	"boxoffice/sqlcgen"
)

// Public event types: what organizers subscribe to and what the "type" of
// a message says. They are a contract: a type is never renamed.
const (
	EventOrderConfirmed = "order.confirmed"
	EventOrderPaid      = "order.paid"
	EventTicketIssued   = "ticket.issued"
	EventOrderFailed    = "order.failed"
	EventOrderCanceled  = "order.canceled"
	EventOrderRefunded  = "order.refunded"
	// EventOrderPartiallyRefunded: some of the order's tickets were
	// refunded; amount_refunded is the charge's refunded total so far.
	EventOrderPartiallyRefunded = "order.partially_refunded"
	EventHoldExpired            = "hold.expired"
)

// EventTypes lists every public event type.
var EventTypes = []string{
	EventOrderConfirmed, EventOrderPaid, EventTicketIssued, EventOrderFailed,
	EventOrderCanceled, EventOrderRefunded, EventOrderPartiallyRefunded, EventHoldExpired,
}

// IsEventType reports whether t is a public event type.
func IsEventType(t string) bool { return slices.Contains(EventTypes, t) }

// sourceTypes are the internal events the fan-out reads, and sourceFor
// which public types each may become.
var sourceTypes = []string{
	outbox.TypeOrderConfirmed, outbox.TypePaymentCaptured, outbox.TypeTicketIssued, outbox.TypeHoldExpired,
	outbox.TypePaymentFailed, outbox.TypeOrderCanceled, outbox.TypePaymentRefunded,
}

// Body is the JSON of every message, per Standard Webhooks: the public
// type, when the fact happened, and the data. It is encoded once, when the
// message is stored; every attempt sends and signs those exact bytes.
type Body struct {
	Type      string          `json:"type"`
	Timestamp time.Time       `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// OrderData is what every order message's data holds: the order, its
// event, and the order's amount. No message ever carries a client secret,
// a token, card data or a provider's internal ids.
type OrderData struct {
	OrderID     uuid.UUID `json:"order_id"`
	EventID     uuid.UUID `json:"event_id"`
	AmountMinor int64     `json:"amount_minor"`
	Currency    string    `json:"currency"`
}

// OrderConfirmedData is the data of order.confirmed: the buyer's payment
// is authorized and the seats are confirmed to the order.
type OrderConfirmedData struct {
	OrderData
	HoldID uuid.UUID `json:"hold_id"`
}

// OrderPaidData is the data of order.paid: the payment was captured.
type OrderPaidData struct {
	OrderData
	AmountReceived int64 `json:"amount_received"`
}

// TicketIssuedData is the data of ticket.issued: the order's tickets.
type TicketIssuedData struct {
	OrderData
	TicketIDs []uuid.UUID `json:"ticket_ids"`
}

// OrderFailedData is the data of order.failed. Reason is hold_expired or
// payment_failed; Code is the provider's decline code, when there is one.
type OrderFailedData struct {
	OrderData
	Reason string `json:"reason"`
	Code   string `json:"code,omitempty"`
}

// OrderCanceledData is the data of order.canceled.
type OrderCanceledData struct {
	OrderData
	Reason string `json:"reason"`
}

// OrderRefundedData is the data of order.refunded and
// order.partially_refunded.
type OrderRefundedData struct {
	OrderData
	AmountRefunded int64 `json:"amount_refunded"`
}

// HoldExpiredData is the data of hold.expired: the hold's seats went back
// on sale.
type HoldExpiredData struct {
	OrderData
	HoldID  uuid.UUID   `json:"hold_id"`
	SeatIDs []uuid.UUID `json:"seat_ids"`
}

// fact is one public message a domain event becomes. sourceKey makes it
// unique per organizer: the event id, except for order.failed, which is
// keyed by the order so that two failure facts of one order (an expiry,
// then a late decline) make one message.
type fact struct {
	eventType string
	sourceKey string
	data      any
}

// errNotYet is a transient error: the fact cannot be judged until the
// saga has applied it.
var errNotYet = errors.New("the saga has not applied the event to the order yet")

// errUndecodable marks a payload that does not decode: no retry helps.
var errUndecodable = errors.New("payload does not decode")

// factsOf maps a domain event to the public facts it stands for, given
// the order as it is now. PaymentFailed fails an order only while it
// awaits payment or capture (docs/saga.md): it becomes order.failed once
// the order is failed, errNotYet while the saga has not applied it, and
// nothing when the order had moved past payment. HoldExpired is always
// both hold.expired and order.failed (whoever expires a hold fails its
// order in the same transaction).
func factsOf(ev outbox.Envelope, o sqlcgen.WebhookOrderSubjectRow) ([]fact, error) {
	base := OrderData{OrderID: ev.AggregateID, EventID: o.EventID, AmountMinor: o.AmountMinor, Currency: o.Currency}
	key := ev.EventID.String()
	failedKey := EventOrderFailed + ":" + ev.AggregateID.String()
	switch ev.EventType {
	case outbox.TypeOrderConfirmed:
		var p outbox.OrderConfirmed
		if err := decode(ev, &p); err != nil {
			return nil, err
		}
		return []fact{{EventOrderConfirmed, key, OrderConfirmedData{base, p.HoldID}}}, nil
	case outbox.TypePaymentCaptured:
		var p outbox.PaymentCaptured
		if err := decode(ev, &p); err != nil {
			return nil, err
		}
		return []fact{{EventOrderPaid, key, OrderPaidData{base, p.AmountReceived}}}, nil
	case outbox.TypeTicketIssued:
		var p outbox.TicketIssued
		if err := decode(ev, &p); err != nil {
			return nil, err
		}
		return []fact{{EventTicketIssued, key, TicketIssuedData{base, nonNil(p.TicketIDs)}}}, nil
	case outbox.TypeHoldExpired:
		var p outbox.HoldExpired
		if err := decode(ev, &p); err != nil {
			return nil, err
		}
		return []fact{
			{EventHoldExpired, key, HoldExpiredData{base, p.HoldID, nonNil(p.SeatIDs)}},
			{EventOrderFailed, failedKey, OrderFailedData{OrderData: base, Reason: "hold_expired"}},
		}, nil
	case outbox.TypePaymentFailed:
		var p outbox.PaymentFailed
		if err := decode(ev, &p); err != nil {
			return nil, err
		}
		switch st := purchase.OrderStatus(o.Status); {
		case st == purchase.OrderFailed:
			return []fact{{EventOrderFailed, failedKey, OrderFailedData{base, "payment_failed", p.Code}}}, nil
		case st.AwaitsPayment() || st == purchase.OrderCapturePending:
			return nil, errNotYet
		}
		return nil, nil
	case outbox.TypeOrderCanceled:
		var p outbox.OrderCanceled
		if err := decode(ev, &p); err != nil {
			return nil, err
		}
		return []fact{{EventOrderCanceled, key, OrderCanceledData{base, p.Reason}}}, nil
	case outbox.TypePaymentRefunded:
		var p outbox.PaymentRefunded
		if err := decode(ev, &p); err != nil {
			return nil, err
		}
		// The charge refunded in full is order.refunded once the saga has
		// made the order refunded; anything less (a refund of selected
		// tickets, or a late webhook of one) is order.partially_refunded.
		switch st := purchase.OrderStatus(o.Status); {
		case p.AmountRefunded < o.AmountMinor:
			return []fact{{EventOrderPartiallyRefunded, key, OrderRefundedData{base, p.AmountRefunded}}}, nil
		case st == purchase.OrderRefunding:
			return nil, errNotYet
		}
		return []fact{{EventOrderRefunded, key, OrderRefundedData{base, p.AmountRefunded}}}, nil
	}
	return nil, nil
}

func decode(ev outbox.Envelope, v any) error {
	if err := json.Unmarshal(ev.Payload, v); err != nil {
		return fmt.Errorf("%s: %w", ev.EventType, errUndecodable)
	}
	return nil
}

func nonNil(ids []uuid.UUID) []uuid.UUID {
	if ids == nil {
		return []uuid.UUID{}
	}
	return ids
}

// encodeBody returns the bytes of a message: {type, timestamp, data}.
func encodeBody(eventType string, at time.Time, data any) ([]byte, error) {
	d, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("marshal %s data: %w", eventType, err)
	}
	b, err := json.Marshal(Body{Type: eventType, Timestamp: at.UTC(), Data: d})
	if err != nil {
		return nil, fmt.Errorf("marshal %s message: %w", eventType, err)
	}
	return b, nil
}
