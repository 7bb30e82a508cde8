package payments

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Provider moves money. It is the only way the application does, so that
// the purchase saga runs unchanged against Stripe and against the sandbox.
//
// Every method may be called from many goroutines and processes at once.
// Mutating methods take an idempotency key (at most 255 bytes) and are
// safe to repeat with it: see the package documentation. Every non-nil
// error is an *Error whose Retryable field says whether repeating the same
// call can succeed.
type Provider interface {
	// CreateIntent creates a PaymentIntent for the amount with
	// capture_method=manual: the buyer's card is authorized when they
	// confirm it, and nothing is collected until Capture. The intent's
	// metadata is p.Metadata plus "order_id" set to p.OrderID. Repeating
	// the call with the same key returns the intent the first call
	// created, as it was then.
	CreateIntent(ctx context.Context, p CreateIntentParams) (Intent, error)
	// Capture collects the full authorized amount of an intent in
	// requires_capture, which becomes succeeded. Any other status is a
	// permanent error with code CodeUnexpectedState. Use the key
	// "capture:<order_id>".
	Capture(ctx context.Context, intentID, idempotencyKey string) (Intent, error)
	// Cancel releases an intent that has not been captured (status
	// requires_payment_method, requires_confirmation, requires_action or
	// requires_capture), which becomes canceled; an authorization's hold on
	// the buyer's card is released. Any other status is a permanent error
	// with code CodeUnexpectedState. Use the key "cancel:<order_id>".
	Cancel(ctx context.Context, intentID, idempotencyKey string) (Intent, error)
	// Refund refunds amountMinor of a succeeded intent's captured amount,
	// or (amountMinor 0) whatever of it is not refunded yet. A charge
	// refunded in full refunds nothing more: another refund under another
	// key is a permanent error with code CodeChargeAlreadyRefunded, and an
	// amount above what is left one with CodeInvalidRequest. Use the key
	// "refund:<order_id>" for the refund of a whole order and
	// "refund:<refund_id>" for a refund of selected tickets.
	Refund(ctx context.Context, intentID string, amountMinor int64, idempotencyKey string) (Refund, error)
	// Get reads an intent as the provider sees it now: the truth to
	// consult when a webhook and local state disagree. An unknown intent is
	// a permanent error with code CodeResourceMissing.
	Get(ctx context.Context, intentID string) (Intent, error)
	// List returns the intents created in [createdFrom, createdTo), newest
	// first, at the provider's one-second resolution (both bounds are
	// truncated to the second), for reconciliation. It reads every page,
	// so keep the window small.
	List(ctx context.Context, createdFrom, createdTo time.Time) ([]Intent, error)
}

// CreateIntentParams is the input of Provider.CreateIntent.
type CreateIntentParams struct {
	// OrderID is the order being paid for; it becomes metadata "order_id",
	// which is how webhooks find their order. Required.
	OrderID uuid.UUID
	// AmountMinor is the amount in the currency's minor unit (cents).
	// Required, positive.
	AmountMinor int64
	// Currency is the ISO 4217 code; it is lowercased, as Stripe reports
	// it. Required.
	Currency string
	// IdempotencyKey binds the call, e.g. "authorize:<event_id>". Required.
	IdempotencyKey string
	// Metadata is copied onto the intent (and so into its webhooks): at
	// most 50 keys of at most 40 bytes, values of at most 500 bytes.
	// "order_id" is reserved. Never put secrets or personal data here.
	Metadata map[string]string
}

// IntentStatus is a PaymentIntent's status, with Stripe's values.
type IntentStatus string

// The statuses of a PaymentIntent. A manual-capture intent moves
// requires_payment_method → requires_capture → succeeded, or to canceled.
const (
	StatusRequiresPaymentMethod IntentStatus = "requires_payment_method"
	StatusRequiresConfirmation  IntentStatus = "requires_confirmation"
	StatusRequiresAction        IntentStatus = "requires_action"
	StatusProcessing            IntentStatus = "processing"
	StatusRequiresCapture       IntentStatus = "requires_capture"
	StatusCanceled              IntentStatus = "canceled"
	StatusSucceeded             IntentStatus = "succeeded"
)

// The webhook event types the application acts on, with Stripe's names.
// Both implementations cause them: Stripe sends them to the endpoint
// configured in its dashboard; the sandbox sends them to
// sandbox.Config.WebhookURL (package payments/sandbox).
const (
	// EventAmountCapturableUpdated: the buyer's card was authorized; the
	// intent is in requires_capture.
	EventAmountCapturableUpdated = "payment_intent.amount_capturable_updated"
	// EventPaymentFailed: an attempt to pay was declined; the intent is
	// back in requires_payment_method with a last_payment_error.
	EventPaymentFailed = "payment_intent.payment_failed"
	// EventSucceeded: the intent was captured.
	EventSucceeded = "payment_intent.succeeded"
	// EventCanceled: the intent was canceled.
	EventCanceled = "payment_intent.canceled"
	// EventRequiresAction: the buyer must complete a 3-D Secure challenge
	// before the intent is authorized or declined.
	EventRequiresAction = "payment_intent.requires_action"
	// EventProcessing: an asynchronous payment method is being processed.
	EventProcessing = "payment_intent.processing"
	// EventChargeRefunded: the intent's charge was refunded; the event's
	// object is a charge whose payment_intent names the intent.
	EventChargeRefunded = "charge.refunded"
)

// Intent is a PaymentIntent as the provider reported it.
//
// ClientSecret is sensitive: it lets whoever holds it confirm the payment.
// Store it only in the payments row, return it only to the order's owner
// while payment is pending, and never log it, publish it, put it in a URL
// or an error. String, GoString, LogValue and the JSON encoding of Intent
// omit it, so logging an Intent is safe.
type Intent struct {
	// ID is the provider's id, pi_….
	ID string `json:"id"`
	// ClientSecret is the secret the buyer's browser confirms the payment
	// with. Sensitive: see above.
	ClientSecret string `json:"-"`
	// Status is the intent's status.
	Status IntentStatus `json:"status"`
	// AmountMinor is the amount to be paid, in the currency's minor unit.
	AmountMinor int64 `json:"amount_minor"`
	// Currency is the lowercase ISO 4217 code.
	Currency string `json:"currency"`
	// AmountCapturable is what Capture would collect: the authorized amount
	// while the status is requires_capture, else 0.
	AmountCapturable int64 `json:"amount_capturable"`
	// AmountReceived is what has been collected.
	AmountReceived int64 `json:"amount_received"`
	// AmountRefunded is what of it has been refunded (the latest charge's
	// amount_refunded), as Get and List report it.
	AmountRefunded int64 `json:"amount_refunded"`
	// Metadata is the intent's metadata, "order_id" included.
	Metadata map[string]string `json:"metadata,omitempty"`
	// LastPaymentError says why the last attempt to pay failed, or is nil.
	LastPaymentError *PaymentError `json:"last_payment_error,omitempty"`
	// Created is when the provider created the intent, to the second.
	Created time.Time `json:"created"`
}

// PaymentError is why an attempt to pay an intent failed: Stripe's
// last_payment_error, without the card details.
type PaymentError struct {
	// Code is Stripe's error code, e.g. "card_declined".
	Code string `json:"code,omitempty"`
	// DeclineCode is the issuer's reason, e.g. "insufficient_funds".
	DeclineCode string `json:"decline_code,omitempty"`
	// Message is a human-readable explanation, fit to show the buyer.
	Message string `json:"message,omitempty"`
}

// String describes the intent without its client secret.
func (i Intent) String() string {
	return fmt.Sprintf("Intent{ID: %s, Status: %s, Amount: %d %s, Capturable: %d, Received: %d, Created: %s}",
		i.ID, i.Status, i.AmountMinor, i.Currency, i.AmountCapturable, i.AmountReceived, i.Created.UTC().Format(time.RFC3339))
}

// GoString is String, so that %#v leaves the client secret out too.
func (i Intent) GoString() string { return "payments." + i.String() }

// LogValue logs the intent without its client secret.
func (i Intent) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("id", i.ID),
		slog.String("status", string(i.Status)),
		slog.Int64("amount_minor", i.AmountMinor),
		slog.String("currency", i.Currency),
		slog.Int64("amount_capturable", i.AmountCapturable),
		slog.Int64("amount_received", i.AmountReceived),
	}
	if orderID, ok := i.Metadata["order_id"]; ok {
		attrs = append(attrs, slog.String("order_id", orderID))
	}
	if i.LastPaymentError != nil {
		attrs = append(attrs, slog.String("last_payment_error", i.LastPaymentError.Code))
	}
	return slog.GroupValue(attrs...)
}

// Refund is a refund of an intent's charge.
type Refund struct {
	// ID is the provider's id, re_….
	ID string `json:"id"`
	// IntentID is the refunded PaymentIntent.
	IntentID string `json:"intent_id"`
	// AmountMinor is the refunded amount, in the currency's minor unit.
	AmountMinor int64 `json:"amount_minor"`
	// Currency is the lowercase ISO 4217 code.
	Currency string `json:"currency"`
	// Status is Stripe's refund status: "succeeded", or "pending" until
	// the card network confirms, "failed", "requires_action", "canceled".
	Status string `json:"status"`
	// Created is when the provider created the refund, to the second.
	Created time.Time `json:"created"`
}

// Metadata limits Stripe enforces, checked before any request is made.
const (
	maxMetadataKeys     = 50
	maxMetadataKeyLen   = 40
	maxMetadataValueLen = 500
	maxIdempotencyKey   = 255
)

// orderIDKey is the metadata key CreateIntent sets to the order id.
const orderIDKey = "order_id"

// ValidateCreate checks p before anything is sent, and returns its
// currency lowercased and its metadata with "order_id" set.
func ValidateCreate(p CreateIntentParams) (currency string, metadata map[string]string, err error) {
	const op = "create intent"
	if p.OrderID == uuid.Nil {
		return "", nil, Invalid(op, "", "order id is required")
	}
	if p.AmountMinor <= 0 {
		return "", nil, Invalid(op, "", fmt.Sprintf("amount must be positive, got %d", p.AmountMinor))
	}
	currency = strings.ToLower(p.Currency)
	if len(currency) != 3 {
		return "", nil, Invalid(op, "", fmt.Sprintf("currency must be a 3-letter ISO 4217 code, got %q", p.Currency))
	}
	if err := validateKey(op, "", p.IdempotencyKey); err != nil {
		return "", nil, err
	}
	if _, ok := p.Metadata[orderIDKey]; ok {
		return "", nil, Invalid(op, "", `metadata key "order_id" is reserved`)
	}
	if len(p.Metadata) >= maxMetadataKeys {
		return "", nil, Invalid(op, "", fmt.Sprintf("metadata may have at most %d keys besides order_id", maxMetadataKeys-1))
	}
	metadata = make(map[string]string, len(p.Metadata)+1)
	for k, v := range p.Metadata {
		if k == "" || len(k) > maxMetadataKeyLen {
			return "", nil, Invalid(op, "", fmt.Sprintf("metadata keys must have 1 to %d bytes", maxMetadataKeyLen))
		}
		if len(v) > maxMetadataValueLen {
			return "", nil, Invalid(op, "", fmt.Sprintf("metadata value of %q exceeds %d bytes", k, maxMetadataValueLen))
		}
		metadata[k] = v
	}
	metadata[orderIDKey] = p.OrderID.String()
	return currency, metadata, nil
}

// ValidateMutation checks the arguments of Capture, Cancel and Refund.
func ValidateMutation(op, intentID, key string) error {
	if intentID == "" {
		return Invalid(op, "", "intent id is required")
	}
	return validateKey(op, intentID, key)
}

func validateKey(op, intentID, key string) error {
	if key == "" {
		return Invalid(op, intentID, "idempotency key is required")
	}
	if len(key) > maxIdempotencyKey {
		return Invalid(op, intentID, fmt.Sprintf("idempotency key exceeds %d bytes", maxIdempotencyKey))
	}
	return nil
}
