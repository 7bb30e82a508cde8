package consumers

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// ErrPermanent marks a handler error that no retry can fix: the message is
// dead-lettered at once and the handler's transaction rolled back. Wrap it
// with Permanent, or with fmt.Errorf("…: %w", ErrPermanent). Like river's
// JobCancel.
//
// The error's message becomes the dead letter's Boxoffice-Reason header
// and the termination reason JetStream advertises, cut to 200 bytes: like
// every error message it must hold no secrets, tokens or card data.
var ErrPermanent = errors.New("permanent failure")

// Permanent wraps err so the runtime dead-letters the message at once
// instead of retrying it. errors.Is(Permanent(err), err) holds.
// Permanent(nil) is ErrPermanent.
func Permanent(err error) error {
	if err == nil {
		return ErrPermanent
	}
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}

// panicError is a recovered handler panic. It is transient: the next
// delivery may well succeed.
type panicError struct {
	value any
	stack []byte
}

func newPanicError(value any) *panicError {
	return &panicError{value: value, stack: debug.Stack()}
}

func (e *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.value) }

// invalidEnvelopeError says why a message is not a usable envelope, in
// words that never quote the message.
type invalidEnvelopeError struct{ reason string }

func (e *invalidEnvelopeError) Error() string { return "invalid envelope: " + e.reason }

// errExhausted stops a message that comes back after its last allowed
// delivery (the process died while handling it, or its dead letter could
// not be stored) from running the handler again.
var errExhausted = errors.New("deliveries exhausted")
