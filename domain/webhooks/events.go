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
	"boxoffice/platform/payload"
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
	// EventWaitlistOffered: seats that came back were offered to a buyer
	// on the event's waitlist, until the offer expires. Not about an
	// order: the buyer has none yet.
	EventWaitlistOffered = "waitlist.offered"
)

// Message types that are not about an order, also a contract: a test the
// organizer asked for, and operational notices about their own endpoints.
const (
	// EventWebhookTest is sent to one endpoint when the organizer asks
	// for it (POST /v1/webhook-endpoints/{endpointId}/test), whatever its
	// filter. It cannot be subscribed to.
	EventWebhookTest = "webhook.test"
	// EventEndpointDisabled: the dispatcher disabled one of the
	// organizer's endpoints (it answered 410, or failed every attempt for
	// days). Sent once per disabling.
	EventEndpointDisabled = "endpoint.disabled"
	// EventDeliveryExhausted: a delivery to one of the organizer's
	// endpoints used up its retries and is dead. Sent once per exhausted
	// delivery (again if it is recovered and exhausts again).
	EventDeliveryExhausted = "delivery.exhausted"
	// EventDeliveryNeedsReview: a delivery to one of the organizer's
	// endpoints got a terminal answer (a redirect, a 4xx other than 408,
	// 410 and 429, a 501 or a 505) and waits in needs_review until it is
	// recovered or replayed. Sent once per delivery that enters review
	// (again if it is recovered and is refused again).
	EventDeliveryNeedsReview = "delivery.needs_review"
)

// EventTypes lists every public event type: the facts about orders, which
// an endpoint gets when its filter is empty or names them.
var EventTypes = []string{
	EventOrderConfirmed, EventOrderPaid, EventTicketIssued, EventOrderFailed,
	EventOrderCanceled, EventOrderRefunded, EventOrderPartiallyRefunded, EventHoldExpired,
	EventWaitlistOffered,
}

// NoticeTypes lists the operational notices. An endpoint gets a notice
// only when its filter names the notice's type (an empty filter means
// every event type, not the notices), never a notice about itself, and
// never one about another organizer's endpoint.
var NoticeTypes = []string{EventEndpointDisabled, EventDeliveryExhausted, EventDeliveryNeedsReview}

// MessageType is one type a message may have: its name, when it is sent,
// and the Go type its data is encoded from.
type MessageType struct {
	// Name is the message's "type", such as order.paid.
	Name string
	// Kind is KindEvent, KindNotice or KindTest.
	Kind string
	// Description says when a message of the type is sent.
	Description string
	// Data is a zero value of the named struct the message's "data" is
	// the JSON of.
	Data any
}

// Kinds of message type.
const (
	KindEvent  = "event"  // a fact about an order (EventTypes)
	KindNotice = "notice" // an operational notice (NoticeTypes)
	KindTest   = "test"   // webhook.test
)

// MessageTypes lists every type a message may have, each with the Go type
// of its data: the registry payload documentation is generated from. Every
// entry of EventTypes and NoticeTypes is here, and webhook.test.
var MessageTypes = []MessageType{
	{EventOrderConfirmed, KindEvent, "The buyer's payment is authorized and the seats are confirmed to the order.", OrderConfirmedData{}},
	{EventOrderPaid, KindEvent, "The payment was captured.", OrderPaidData{}},
	{EventTicketIssued, KindEvent, "The order's tickets were issued.", TicketIssuedData{}},
	{EventOrderFailed, KindEvent, "The order failed: its hold expired or its payment was declined.", OrderFailedData{}},
	{EventOrderCanceled, KindEvent, "The order was canceled.", OrderCanceledData{}},
	{EventOrderRefunded, KindEvent, "The order's charge was refunded in full.", OrderRefundedData{}},
	{EventOrderPartiallyRefunded, KindEvent, "Some of the order's tickets were refunded.", OrderRefundedData{}},
	{EventHoldExpired, KindEvent, "The order's hold expired; its seats went back on sale.", HoldExpiredData{}},
	{EventWaitlistOffered, KindEvent, "Seats that came back were offered to a buyer on the event's waitlist, until the offer expires.", WaitlistOfferedData{}},
	{EventEndpointDisabled, KindNotice, "The dispatcher disabled another of your endpoints.", EndpointDisabledData{}},
	{EventDeliveryExhausted, KindNotice, "A delivery to another of your endpoints used up its retries.", DeliveryExhaustedData{}},
	{EventDeliveryNeedsReview, KindNotice, "A delivery to another of your endpoints got a terminal answer and waits for review (recover or replay it once the receiver is fixed).", DeliveryNeedsReviewData{}},
	{EventWebhookTest, KindTest, "You asked for a test delivery to this endpoint.", WebhookTestData{}},
}

// IsEventType reports whether t is a public event type (EventTypes).
func IsEventType(t string) bool { return slices.Contains(EventTypes, t) }

// IsNoticeType reports whether t is an operational notice (NoticeTypes).
func IsNoticeType(t string) bool { return slices.Contains(NoticeTypes, t) }

// IsSubscribable reports whether an endpoint's filter may name t: an
// event type or a notice, not webhook.test.
func IsSubscribable(t string) bool { return IsEventType(t) || IsNoticeType(t) }

// IsMessageType reports whether t is the type of some message
// (MessageTypes).
func IsMessageType(t string) bool {
	return slices.ContainsFunc(MessageTypes, func(m MessageType) bool { return m.Name == t })
}

// sourceTypes are the internal events the fan-out reads, and sourceFor
// which public types each may become (what factsOf can make of it): an
// event none of whose types an organizer's endpoint subscribes to is
// nothing to that organizer, whatever the order's state.
var (
	sourceTypes = []string{
		outbox.TypeOrderConfirmed, outbox.TypePaymentCaptured, outbox.TypeTicketIssued, outbox.TypeHoldExpired,
		outbox.TypePaymentFailed, outbox.TypeOrderCanceled, outbox.TypePaymentRefunded,
	}
	sourceFor = map[string][]string{
		outbox.TypeOrderConfirmed:  {EventOrderConfirmed},
		outbox.TypePaymentCaptured: {EventOrderPaid},
		outbox.TypeTicketIssued:    {EventTicketIssued},
		outbox.TypeHoldExpired:     {EventHoldExpired, EventOrderFailed},
		outbox.TypePaymentFailed:   {EventOrderFailed},
		outbox.TypeOrderCanceled:   {EventOrderCanceled},
		outbox.TypePaymentRefunded: {EventOrderRefunded, EventOrderPartiallyRefunded},
	}
)

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
	OrderID     uuid.UUID `json:"order_id" format:"uuid" doc:"The order."`
	EventID     uuid.UUID `json:"event_id" format:"uuid" doc:"The order's event."`
	AmountMinor int64     `json:"amount_minor" doc:"The order's amount, in minor units of currency."`
	Currency    string    `json:"currency" doc:"ISO 4217, lower case."`
}

// OrderConfirmedData is the data of order.confirmed: the buyer's payment
// is authorized and the seats are confirmed to the order.
type OrderConfirmedData struct {
	OrderData
	HoldID uuid.UUID `json:"hold_id" format:"uuid" doc:"The order's hold."`
}

// OrderPaidData is the data of order.paid: the payment was captured.
type OrderPaidData struct {
	OrderData
	AmountReceived int64 `json:"amount_received" doc:"What was captured, in minor units."`
}

// TicketIssuedData is the data of ticket.issued: the order's tickets.
type TicketIssuedData struct {
	OrderData
	TicketIDs []uuid.UUID `json:"ticket_ids" doc:"The tickets issued."`
}

// OrderFailedData is the data of order.failed. Reason is hold_expired or
// payment_failed; Code is the provider's decline code, when there is one.
type OrderFailedData struct {
	OrderData
	Reason string `json:"reason" enum:"hold_expired,payment_failed" doc:"Why it failed."`
	Code   string `json:"code,omitempty" doc:"The provider's decline code, when there is one (such as card_declined)."`
}

// WaitlistOfferedData is the data of waitlist.offered. It names the
// buyer by the waitlist entry, never by their identity.
type WaitlistOfferedData struct {
	EntryID    uuid.UUID   `json:"entry_id" format:"uuid" doc:"The waitlist entry offered the seats."`
	EventID    uuid.UUID   `json:"event_id" format:"uuid" doc:"The event."`
	CategoryID uuid.UUID   `json:"category_id" format:"uuid" doc:"The price category of the seats."`
	SeatIDs    []uuid.UUID `json:"seat_ids" doc:"The seats offered, reserved for the buyer until expires_at."`
	ExpiresAt  time.Time   `json:"expires_at" doc:"When the offer passes to the next buyer if not accepted."`
}

// OrderCanceledData is the data of order.canceled.
type OrderCanceledData struct {
	OrderData
	Reason string `json:"reason" doc:"Why it was canceled: canceled_by_buyer, or voided_by_organizer for an order the organizer issued and voided."`
}

// OrderRefundedData is the data of order.refunded and
// order.partially_refunded.
type OrderRefundedData struct {
	OrderData
	AmountRefunded int64 `json:"amount_refunded" doc:"The charge's refunded total so far, in minor units."`
}

// HoldExpiredData is the data of hold.expired: the hold's seats went back
// on sale.
type HoldExpiredData struct {
	OrderData
	HoldID  uuid.UUID   `json:"hold_id" format:"uuid" doc:"The hold that expired."`
	SeatIDs []uuid.UUID `json:"seat_ids" doc:"Its seats, back on sale."`
}

// WebhookTestData is the data of webhook.test: a message the organizer
// asked for to check their receiver. It goes to that endpoint only, signed
// and retried like any other, and says nothing about orders.
type WebhookTestData struct {
	// EndpointID is the endpoint the test was asked for.
	EndpointID uuid.UUID `json:"endpoint_id" format:"uuid" doc:"The endpoint the test was asked for."`
	// Message is a fixed human-readable note.
	Message string `json:"message" doc:"A fixed human-readable note."`
}

// EndpointDisabledData is the data of endpoint.disabled: the dispatcher
// disabled one of the organizer's endpoints. Its pending deliveries were
// stopped and are kept for recover and replay; enabling it (PATCH
// enabled: true) resumes new deliveries. The endpoint's URL is not
// included: it may carry a token meant for that receiver only.
type EndpointDisabledData struct {
	// EndpointID is the endpoint that was disabled.
	EndpointID uuid.UUID `json:"endpoint_id" format:"uuid" doc:"The endpoint that was disabled."`
	// Reason is gone (it answered 410) or failing (it failed every
	// attempt for the configured time, 5 days unless the deployment
	// says otherwise).
	Reason string `json:"reason" enum:"gone,failing" doc:"gone: it answered 410; failing: it failed every attempt for the deployment's disable-after time (5 days by default)."`
	// DisabledAt is when it was disabled.
	DisabledAt time.Time `json:"disabled_at" doc:"When it was disabled."`
	// FailingSince is its first failure since its last success, when it
	// was failing.
	FailingSince *time.Time `json:"failing_since,omitempty" doc:"Its first failure since its last success, when it was failing."`
}

// DeliveryExhaustedData is the data of delivery.exhausted: a delivery to
// one of the organizer's endpoints used up its retries and is dead; it
// can be sent again with recover or replay. Notices and tests are not
// themselves the subject of a notice.
type DeliveryExhaustedData struct {
	// EndpointID is the endpoint the delivery was for.
	EndpointID uuid.UUID `json:"endpoint_id" format:"uuid" doc:"The endpoint the delivery was for."`
	// MessageID is the webhook-id of the message that was not delivered
	// (msg_<uuid>).
	MessageID string `json:"message_id" doc:"The webhook-id of the message that was not delivered (msg_<uuid>)."`
	// EventType is that message's type.
	EventType string `json:"event_type" doc:"That message's type."`
	// Attempts is how many attempts the delivery made in all.
	Attempts int32 `json:"attempts" doc:"How many attempts the delivery made in all."`
	// LastError is the last attempt's error class, with its status code
	// when an answer came, such as "http_5xx (status 503)".
	LastError string `json:"last_error" doc:"The last attempt's error class, with its status code when an answer came, such as http_5xx (status 503)."`
}

// DeliveryNeedsReviewData is the data of delivery.needs_review: a delivery
// to one of the organizer's endpoints got a terminal answer and waits in
// needs_review; recover or replay sends it again. It has the fields of
// DeliveryExhaustedData, with the status code of the answer on its own.
type DeliveryNeedsReviewData struct {
	// EndpointID is the endpoint the delivery was for.
	EndpointID uuid.UUID `json:"endpoint_id" format:"uuid" doc:"The endpoint the delivery was for."`
	// MessageID is the webhook-id of the message that was refused
	// (msg_<uuid>).
	MessageID string `json:"message_id" doc:"The webhook-id of the message that was refused (msg_<uuid>)."`
	// EventType is that message's type.
	EventType string `json:"event_type" doc:"That message's type."`
	// Attempts is how many attempts the delivery made in all.
	Attempts int32 `json:"attempts" doc:"How many attempts the delivery made in all."`
	// StatusCode is the terminal answer's HTTP status.
	StatusCode int `json:"status_code" doc:"The terminal answer's HTTP status, such as 400, 301 or 501."`
	// LastError is the error class with the status code, such as
	// "http_4xx (status 400)".
	LastError string `json:"last_error" doc:"The error class with its status code, such as http_4xx (status 400)."`
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
func factsOf(ev outbox.Envelope, o orderSubject) ([]fact, error) {
	base := OrderData{OrderID: ev.AggregateID, EventID: o.eventID, AmountMinor: o.amountMinor, Currency: o.currency}
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
		return []fact{{EventTicketIssued, key, TicketIssuedData{base, p.TicketIDs}}}, nil
	case outbox.TypeHoldExpired:
		var p outbox.HoldExpired
		if err := decode(ev, &p); err != nil {
			return nil, err
		}
		return []fact{
			{EventHoldExpired, key, HoldExpiredData{base, p.HoldID, p.SeatIDs}},
			{EventOrderFailed, failedKey, OrderFailedData{OrderData: base, Reason: "hold_expired"}},
		}, nil
	case outbox.TypePaymentFailed:
		var p outbox.PaymentFailed
		if err := decode(ev, &p); err != nil {
			return nil, err
		}
		switch st := purchase.OrderStatus(o.status); {
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
		switch st := purchase.OrderStatus(o.status); {
		case p.AmountRefunded < o.amountMinor:
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

// encodeBody returns the bytes of a message: {type, timestamp, data}, its
// data encoded by payload (a nil list is [], as the contract says).
func encodeBody(eventType string, at time.Time, data any) ([]byte, error) {
	d, err := payload.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("marshal %s data: %w", eventType, err)
	}
	b, err := json.Marshal(Body{Type: eventType, Timestamp: at.UTC(), Data: d})
	if err != nil {
		return nil, fmt.Errorf("marshal %s message: %w", eventType, err)
	}
	return b, nil
}
