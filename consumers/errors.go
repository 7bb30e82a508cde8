package consumers

import (
	"errors"
	"fmt"
	"runtime/debug"

	"boxoffice/platform/fault"
)

// ErrPermanent marks a handler error that no retry can fix: the message is
// dead-lettered at once and the handler's transaction rolled back. It is
// fault.ErrPermanent, the one such notion: a domain package's step returns
// it without knowing of the runtime. Like river's JobCancel. Its message
// becomes the dead letter's reason (see fault.ErrPermanent).
var ErrPermanent = fault.ErrPermanent

// Permanent wraps err so the runtime dead-letters the message at once
// instead of retrying it: fault.Permanent.
func Permanent(err error) error { return fault.Permanent(err) }

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
