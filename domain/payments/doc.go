// Package payments is the only way Boxoffice moves money: a Provider
// interface over Stripe PaymentIntents with manual capture, the Stripe
// adapter (the real thing, through stripe-go), the payment policy of the
// saga's commands (Commands: which call each command makes, with which
// key, and what a refusal means; the payments consumer runs it), and the
// ingress of the provider's webhooks. Its other implementation, sandbox.Sandbox (package
// payments/sandbox), is a PostgreSQL-backed stand-in for development and
// tests that behaves like Stripe from the application's side, webhooks
// included.
//
// # The money flow
//
// The purchase saga authorizes first and captures later, so it can confirm
// that the buyer's seat hold is still alive before any money is collected:
//
//	CreateIntent (capture_method=manual)   status requires_payment_method
//	  buyer confirms a card                status requires_capture;
//	                                       webhook payment_intent.amount_capturable_updated
//	Capture                                status succeeded; webhook payment_intent.succeeded
//	Cancel (instead of Capture)            status canceled; webhook payment_intent.canceled
//	Refund (after Capture)                 webhook charge.refunded
//
// A declined card leaves the intent in requires_payment_method, with a
// LastPaymentError, and sends payment_intent.payment_failed; the buyer may
// try another card.
//
// # Idempotency
//
// Every call that moves money or changes an intent takes an idempotency key
// and is safe to repeat with it: the provider performs the operation once
// and answers every repeat with the response of the first call — including
// a stored error (Stripe stores the result of any request that started
// executing). The saga derives keys from facts that do not change between
// retries, so a worker that crashes between the provider's answer and its
// own commit gets the same logical operation back when it replays:
//
//	CreateIntent  "authorize:<event_id>"  (the PaymentAuthorizationRequested event)
//	Capture       "capture:<order_id>"
//	Cancel        "cancel:<order_id>"
//	Refund        "refund:<order_id>"
//
// Reusing a key for a different request (another intent, amount or
// operation) is refused with a permanent error. Stripe forgets keys after
// 24 hours; the sandbox keeps them.
//
// # Errors
//
// Every error a Provider returns is an *Error (use errors.As, or the
// IsRetryable and ErrorCode helpers). Its Retryable field is the contract:
//
//   - Retryable: the outcome is unknown or the failure transient — no
//     response (network error, timeout, canceled context), a provider 5xx,
//     a rate limit (429), a lock timeout, or an idempotency key in use by a
//     concurrent request (409). Repeat the same call with the same key,
//     after a backoff; it will not act twice.
//   - Not retryable: repeating the same call cannot succeed — a declined
//     card (card_declined), an invalid request, an unknown intent
//     (resource_missing), an intent in the wrong state
//     (payment_intent_unexpected_state), a refund of a refunded charge
//     (charge_already_refunded), a key reused for another request, bad
//     credentials. The caller must change course (fail or compensate the
//     order), not retry.
//
// Error messages name the operation, the intent and the provider's reason;
// they never hold a client secret, an API key or a raw response body.
//
// # Secrets
//
// Intent.ClientSecret lets a browser confirm the payment. It must never be
// logged, published to the bus, put in a URL or sent to analytics: it is
// stored in the payments row and returned to the order's owner only while
// payment is pending. Intent's String, GoString and LogValue methods, and
// its JSON encoding, leave it out, so an Intent may be logged whole.
//
// # Tables
//
// It owns, as its one writer, stripe_events (the webhook ids it took in;
// the retention worker deletes old ones). The payments table (each
// order's intent, secret and status) is written only by its package
// record, which the commands, the ingress and the purchase saga ask:
// record sits below the saga, which this package builds on, so the saga
// can ask it without an import cycle. The sandbox's tables are
// sandbox's.
package payments
