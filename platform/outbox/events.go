package outbox

import (
	"time"

	"github.com/google/uuid"
)

// Payloads of the payment facts that enter through the provider's webhooks.
// Each names the order and the PaymentIntent and never carries a client
// secret or card data. ProviderEventID is the provider's event id (Stripe's
// evt_…), kept for tracing.

// PaymentAuthorized is the payload of TypePaymentAuthorized: the buyer's
// card is authorized for AmountCapturable and the intent awaits capture.
type PaymentAuthorized struct {
	OrderID          uuid.UUID `json:"order_id"`
	PaymentIntentID  string    `json:"payment_intent_id"`
	AmountCapturable int64     `json:"amount_capturable"`
	ProviderEventID  string    `json:"provider_event_id"`
}

// PaymentFailed is the payload of TypePaymentFailed: an authorization
// attempt was declined. Code is the provider's decline or error code.
type PaymentFailed struct {
	OrderID         uuid.UUID `json:"order_id"`
	PaymentIntentID string    `json:"payment_intent_id"`
	Code            string    `json:"code,omitempty"`
	ProviderEventID string    `json:"provider_event_id"`
}

// PaymentCaptured is the payload of TypePaymentCaptured: AmountReceived was
// collected.
type PaymentCaptured struct {
	OrderID         uuid.UUID `json:"order_id"`
	PaymentIntentID string    `json:"payment_intent_id"`
	AmountReceived  int64     `json:"amount_received"`
	ProviderEventID string    `json:"provider_event_id"`
}

// AuthorizationCanceled is the payload of TypeAuthorizationCanceled: the
// intent was canceled and any hold on the buyer's card released.
type AuthorizationCanceled struct {
	OrderID         uuid.UUID `json:"order_id"`
	PaymentIntentID string    `json:"payment_intent_id"`
	ProviderEventID string    `json:"provider_event_id"`
}

// PaymentRefunded is the payload of TypePaymentRefunded: AmountRefunded
// went back to the buyer.
type PaymentRefunded struct {
	OrderID         uuid.UUID `json:"order_id"`
	PaymentIntentID string    `json:"payment_intent_id"`
	AmountRefunded  int64     `json:"amount_refunded"`
	ProviderEventID string    `json:"provider_event_id"`
}

// Payloads of the saga's commands and facts (docs/saga.md).

// PaymentAuthorizationRequested is the payload of
// TypePaymentAuthorizationRequested: create the PaymentIntent of an order.
type PaymentAuthorizationRequested struct {
	OrderID     uuid.UUID `json:"order_id"`
	HoldID      uuid.UUID `json:"hold_id"`
	AmountMinor int64     `json:"amount_minor"`
	Currency    string    `json:"currency"`
}

// PaymentIntentCreated is the payload of TypePaymentIntentCreated. It never
// carries the client secret, which lives only in the payments row.
type PaymentIntentCreated struct {
	OrderID         uuid.UUID `json:"order_id"`
	PaymentIntentID string    `json:"payment_intent_id"`
	Status          string    `json:"status"`
}

// OrderConfirmed is the payload of TypeOrderConfirmed: the hold is
// confirmed and the order awaits capture.
type OrderConfirmed struct {
	OrderID uuid.UUID `json:"order_id"`
	HoldID  uuid.UUID `json:"hold_id"`
}

// CaptureRequested is the payload of TypeCaptureRequested.
type CaptureRequested struct {
	OrderID         uuid.UUID `json:"order_id"`
	PaymentIntentID string    `json:"payment_intent_id"`
}

// Intent returns the order and the PaymentIntent the command is on.
func (c CaptureRequested) Intent() (orderID uuid.UUID, paymentIntentID string) {
	return c.OrderID, c.PaymentIntentID
}

// TicketIssueRequested is the payload of TypeTicketIssueRequested.
type TicketIssueRequested struct {
	OrderID uuid.UUID   `json:"order_id"`
	HoldID  uuid.UUID   `json:"hold_id"`
	SeatIDs []uuid.UUID `json:"seat_ids"`
}

// TicketIssued is the payload of TypeTicketIssued.
type TicketIssued struct {
	OrderID   uuid.UUID   `json:"order_id"`
	TicketIDs []uuid.UUID `json:"ticket_ids"`
}

// HoldExpired is the payload of TypeHoldExpired.
type HoldExpired struct {
	OrderID uuid.UUID   `json:"order_id"`
	HoldID  uuid.UUID   `json:"hold_id"`
	SeatIDs []uuid.UUID `json:"seat_ids"`
}

// AuthorizationCancelRequested is the payload of
// TypeAuthorizationCancelRequested: cancel an intent that must not be
// captured. Reason is a short code such as hold_expired.
type AuthorizationCancelRequested struct {
	OrderID         uuid.UUID `json:"order_id"`
	PaymentIntentID string    `json:"payment_intent_id"`
	Reason          string    `json:"reason"`
}

// Intent returns the order and the PaymentIntent the command is on.
func (c AuthorizationCancelRequested) Intent() (orderID uuid.UUID, paymentIntentID string) {
	return c.OrderID, c.PaymentIntentID
}

// RefundRequested is the payload of TypeRefundRequested: refund the
// order's whole charge (what is left of it) or, with RefundID, the
// AmountMinor of one refund of selected tickets.
type RefundRequested struct {
	OrderID         uuid.UUID `json:"order_id"`
	PaymentIntentID string    `json:"payment_intent_id"`
	Reason          string    `json:"reason"`
	RefundID        uuid.UUID `json:"refund_id,omitzero"`
	AmountMinor     int64     `json:"amount_minor,omitempty"`
}

// Intent returns the order and the PaymentIntent the command is on.
func (c RefundRequested) Intent() (orderID uuid.UUID, paymentIntentID string) {
	return c.OrderID, c.PaymentIntentID
}

// OrderCanceled is the payload of TypeOrderCanceled.
type OrderCanceled struct {
	OrderID uuid.UUID `json:"order_id"`
	Reason  string    `json:"reason"`
}

// SeatsReleased is the payload of TypeSeatsReleased: the organizer
// released blocks of an event's seats, which are on sale again.
type SeatsReleased struct {
	EventID uuid.UUID   `json:"event_id"`
	SeatIDs []uuid.UUID `json:"seat_ids"`
}

// WaitlistOffered is the payload of TypeWaitlistOffered: seats are
// reserved for a waitlist entry's buyer until ExpiresAt.
type WaitlistOffered struct {
	EntryID    uuid.UUID   `json:"entry_id"`
	EventID    uuid.UUID   `json:"event_id"`
	CategoryID uuid.UUID   `json:"category_id"`
	UserID     uuid.UUID   `json:"user_id"`
	SeatIDs    []uuid.UUID `json:"seat_ids"`
	ExpiresAt  time.Time   `json:"expires_at"`
}
