package outbox

import "github.com/google/uuid"

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
