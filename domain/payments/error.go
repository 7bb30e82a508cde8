package payments

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// Error is the error every Provider method returns. See the package
// documentation for the retry contract.
//
// Its message and fields hold no client secret, API key or response body:
// an *Error may be logged whole and its message stored, e.g. as a dead
// letter's reason.
type Error struct {
	// Op is the operation that failed: "create intent", "capture",
	// "cancel", "refund", "get intent", "list intents", and for the
	// sandbox's buyer actions "authorize" and "decline".
	Op string
	// IntentID is the intent the operation was on, if any.
	IntentID string
	// Code classifies the failure: Stripe's error code when it sent one
	// (e.g. "card_declined", "payment_intent_unexpected_state"), else its
	// error type (e.g. "api_error", "invalid_request_error",
	// "idempotency_error"), or CodeNetwork when no response arrived. The
	// Code* constants are the values callers branch on.
	Code string
	// Retryable reports whether repeating the same call with the same
	// idempotency key may succeed: the failure was transient or its
	// outcome is unknown. A permanent failure (false) needs a different
	// call.
	Retryable bool
	// HTTPStatus is the provider's HTTP status, or 0 when no response
	// arrived.
	HTTPStatus int
	// DeclineCode is the card issuer's reason for a card_declined, e.g.
	// "insufficient_funds".
	DeclineCode string
	// RequestID is the provider's id of the failed request (req_…), for
	// its support.
	RequestID string
	// Message is the provider's explanation, or ours.
	Message string
	// Err is the cause when no provider response explains the failure: a
	// network or context error (so errors.Is(err, context.Canceled)
	// works), or a database error in the sandbox. Nil otherwise.
	Err error
}

// Error codes callers branch on. Stripe has many more; Code holds
// whichever it sent.
const (
	// CodeNetwork: no response arrived (connection failure, timeout,
	// canceled context). Retryable.
	CodeNetwork = "network_error"
	// CodeAPIError: the provider failed internally (5xx). Retryable.
	CodeAPIError = "api_error"
	// CodeRateLimit: too many requests (429). Retryable after a backoff.
	CodeRateLimit = "rate_limit"
	// CodeLockTimeout: the object was locked by a concurrent request (429).
	// Retryable.
	CodeLockTimeout = "lock_timeout"
	// CodeIdempotencyKeyInUse: a concurrent request with the same key is
	// still running (409). Retryable: the repeat replays its response.
	CodeIdempotencyKeyInUse = "idempotency_key_in_use"
	// CodeIdempotencyMismatch: the key was used before for a different
	// request. Permanent.
	CodeIdempotencyMismatch = "idempotency_error"
	// CodeInvalidRequest: the request was malformed or invalid. Permanent.
	CodeInvalidRequest = "invalid_request_error"
	// CodeResourceMissing: no such intent (404). Permanent.
	CodeResourceMissing = "resource_missing"
	// CodeUnexpectedState: the intent's status does not allow the
	// operation, e.g. capturing a canceled intent. Permanent; Get the
	// intent to see what it is.
	CodeUnexpectedState = "payment_intent_unexpected_state"
	// CodeChargeAlreadyRefunded: the intent was refunded already.
	// Permanent.
	CodeChargeAlreadyRefunded = "charge_already_refunded"
	// CodeCardDeclined: the card was declined. Permanent for this card.
	CodeCardDeclined = "card_declined"
	// CodeAuthentication: the API key was refused (401/403). Permanent
	// until the configuration is fixed.
	CodeAuthentication = "authentication_error"
)

// Error reads "payments: <op> <intent>: <code> (<status>): <message>".
func (e *Error) Error() string {
	msg := "payments: " + e.Op
	if e.IntentID != "" {
		msg += " " + e.IntentID
	}
	msg += ": " + e.Code
	if e.HTTPStatus != 0 {
		msg += fmt.Sprintf(" (%d)", e.HTTPStatus)
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the network, context or database error behind e, if any.
func (e *Error) Unwrap() error { return e.Err }

// IsRetryable reports whether repeating the call that returned err, with
// the same idempotency key, may succeed. It is false for nil. An error that
// is not an *Error (which a Provider never returns) counts as retryable:
// its outcome is unknown, and the idempotency key makes a repeat safe.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Retryable
	}
	return true
}

// ErrorCode returns the Code of the *Error in err's chain, or "".
func ErrorCode(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return ""
}

// Invalid is a permanent error for a request refused before it was sent.
func Invalid(op, intentID, msg string) *Error {
	return &Error{Op: op, IntentID: intentID, Code: CodeInvalidRequest, HTTPStatus: http.StatusBadRequest, Message: msg}
}

// TransportError is a retryable error for a call whose outcome is unknown
// because no answer arrived: err is a network or context error.
func TransportError(op, intentID string, err error) *Error {
	return &Error{Op: op, IntentID: intentID, Code: CodeNetwork, Retryable: true, Err: err}
}

// IsContextErr reports whether err is the end of a context.
func IsContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
