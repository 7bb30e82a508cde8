// Package fault holds the errors every layer shares the meaning of.
//
// ErrPermanent is the one notion of "no retry can fix this": a domain step
// returns it for an event it can never apply (a payload that does not
// decode, an unknown order), and the consumer runtime dead-letters any
// message whose handler error wraps it, whichever package the handler
// lives in.
package fault

import (
	"errors"
	"fmt"
)

// ErrPermanent marks an error that no retry can fix. Wrap it with
// Permanent, or with fmt.Errorf("…: %w", ErrPermanent).
//
// A consumer dead-letters a message whose handler returns it, and the
// error's message becomes the dead letter's Boxoffice-Reason header and
// the termination reason JetStream advertises, cut to 200 bytes: like
// every error message it must hold no secrets, tokens or card data, and
// no payload bytes.
var ErrPermanent = errors.New("permanent failure")

// Permanent wraps err so that it is permanent. errors.Is(Permanent(err),
// err) holds. Permanent(nil) is ErrPermanent.
func Permanent(err error) error {
	if err == nil {
		return ErrPermanent
	}
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}
