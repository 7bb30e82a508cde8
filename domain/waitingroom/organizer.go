package waitingroom

import (
	"context"

	"github.com/google/uuid"
)

// OrganizerOnsale is the onsale of the event as organizerID, its
// organizer, sees it: after applying change to its settings in one
// transaction when change is not nil (UpdateOnsale). For anyone but the
// event's organizer the event does not exist: ErrEventNotFound, and
// nothing is changed. Also returns ErrNoSettings, and Onsale's and
// UpdateOnsale's errors.
func (r *Room) OrganizerOnsale(ctx context.Context, organizerID, eventID uuid.UUID, change func(*Settings)) (Onsale, error) {
	o, err := r.Onsale(ctx, eventID)
	switch {
	case err != nil:
		return Onsale{}, err
	case o.Event.OrganizerID != organizerID:
		return Onsale{}, ErrEventNotFound
	case change == nil:
		return o, nil
	}
	return r.UpdateOnsale(ctx, eventID, change)
}
