package purchase

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"boxoffice/platform/fault"
)

// SeatLimits says how many seats of an event one buyer may hold or own,
// 0 for no limit; *waitingroom.Room is one, from its cached onsale
// settings.
type SeatLimits interface {
	SeatLimit(ctx context.Context, eventID uuid.UUID) (int, error)
}

// ErrSeatLimitUnknown: the event's per-buyer seat limit could not be read,
// so nothing was held. Checkout wraps the reader's error with it (a
// waiting room whose settings store does not answer wraps
// waitingroom.ErrUnavailable); the same request may succeed later.
var ErrSeatLimitUnknown = fault.New(fault.CodeUnavailable, "buyer's seat limit for the event unknown")

// Checkout is the hold of a buyer the waiting room admitted to the event:
// it reads the event's per-buyer seat limit from limits now, then holds
// p.SeatIDs within it (Hold, with p.SeatLimit replaced by what limits
// says). When the limit cannot be read it returns an error wrapping both
// ErrSeatLimitUnknown and the reader's error, and nothing is held;
// otherwise it returns what Hold returns.
func (s *Service) Checkout(ctx context.Context, limits SeatLimits, p HoldParams) (Hold, error) {
	limit, err := limits.SeatLimit(ctx, p.EventID)
	if err != nil {
		return Hold{}, fmt.Errorf("%w: %w", ErrSeatLimitUnknown, err)
	}
	p.SeatLimit = limit
	return s.Hold(ctx, p)
}
