package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
)

// Inventory is how an event's seats stand: held by an unreleased hold,
// sold (a live ticket, or a refunded one kept off sale), blocked (held
// back by the organizer), or available. Like
// the seat map it is a hint, stale as soon as it is read; only a hold
// decides who gets a seat.
type Inventory struct {
	Seats, Held, Sold, Blocked int
}

// Available is the seats neither held, sold nor blocked (the three never
// overlap: a block is refused for a held or sold seat, and a hold or a
// sale for a blocked one).
func (i Inventory) Available() int { return max(0, i.Seats-i.Held-i.Sold-i.Blocked) }

// SoldOut reports that no seat is available and none is held: nothing can
// come back but a refund that resells or a block the organizer releases.
func (i Inventory) SoldOut() bool { return i.Available() == 0 && i.Held == 0 }

// Inventory counts the event's held and sold seats at one snapshot, from
// index entries of those seats alone (no seat-map scan), or returns
// ErrNotFound.
func (c *Catalog) Inventory(ctx context.Context, eventID uuid.UUID) (Inventory, error) {
	r, err := sqlcgen.New().SeatInventory(ctx, c.read(), eventID)
	if errors.Is(err, db.ErrNotFound) {
		return Inventory{}, ErrNotFound
	} else if err != nil {
		return Inventory{}, fmt.Errorf("count seats: %w", err)
	}
	return Inventory{Seats: int(r.SeatCount), Held: int(r.Held), Sold: int(r.Sold), Blocked: int(r.Blocked)}, nil
}
