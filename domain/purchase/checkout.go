package purchase

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/fault"
)

// CheckoutRules are the organizer's rules a checkout of their event
// follows.
type CheckoutRules struct {
	// SeatLimit is how many seats of the event one buyer may hold or own;
	// 0 for no limit.
	SeatLimit int
	// HoldTTL is how long a hold of the event lasts; 0 for the service's
	// Config.HoldTTL.
	HoldTTL time.Duration
}

// OnsaleRules says an event's checkout rules; *waitingroom.Room is one,
// from its cached onsale settings.
type OnsaleRules interface {
	CheckoutRules(ctx context.Context, eventID uuid.UUID) (CheckoutRules, error)
}

// ErrSeatLimitUnknown: the event's checkout rules (its per-buyer seat
// limit and hold lifetime) could not be read, so nothing was held. Checkout wraps the reader's error with it (a
// waiting room whose settings store does not answer wraps
// waitingroom.ErrUnavailable); the same request may succeed later.
var ErrSeatLimitUnknown = fault.New(fault.CodeUnavailable, "buyer's seat limit for the event unknown")

// Checkout is the hold of a buyer the waiting room admitted to the event:
// it reads the event's checkout rules from rules now, then holds p.SeatIDs
// within them (Hold, with p.SeatLimit and p.HoldTTL replaced by what
// rules says). When the rules cannot be read it returns an error wrapping
// both ErrSeatLimitUnknown and the reader's error, and nothing is held;
// otherwise it returns what Hold returns.
func (s *Service) Checkout(ctx context.Context, rules OnsaleRules, p HoldParams) (Hold, error) {
	r, err := rules.CheckoutRules(ctx, p.EventID)
	if err != nil {
		return Hold{}, fmt.Errorf("%w: %w", ErrSeatLimitUnknown, err)
	}
	p.SeatLimit, p.HoldTTL = r.SeatLimit, r.HoldTTL
	return s.Hold(ctx, p)
}
