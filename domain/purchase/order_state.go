package purchase

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
)

// OrderState is an order's status without its details: what the organizer
// of its event sees of a refunded order, and what the order event stream
// polls.
type OrderState struct {
	ID      uuid.UUID
	EventID uuid.UUID
	Status  OrderStatus
	// UpdatedAt is when the order row last changed, as far as its writers
	// said so.
	UpdatedAt time.Time
	// PaymentIntentID is the order's PaymentIntent, "" until the payments
	// worker created it (OrderStateForOwner only).
	PaymentIntentID string
}

// OrderStateForOwner returns the status of the order with id, and its
// PaymentIntent, if userID owns it, else ErrOrderNotFound. It is one
// primary-key read of the order and one of its payment.
func (s *Service) OrderStateForOwner(ctx context.Context, userID, id uuid.UUID) (OrderState, error) {
	row, err := sqlcgen.New().OrderStatusGetForUser(ctx, s.read(), sqlcgen.OrderStatusGetForUserParams{ID: id, UserID: userID})
	if errors.Is(err, db.ErrNotFound) {
		return OrderState{}, ErrOrderNotFound
	} else if err != nil {
		return OrderState{}, fmt.Errorf("get order status: %w", err)
	}
	return OrderState{ID: row.ID, EventID: row.EventID, Status: OrderStatus(row.Status), UpdatedAt: row.UpdatedAt, PaymentIntentID: row.PaymentIntentID}, nil
}

// Change is st as an OrderChange: what a read of the order says of it.
func (st OrderState) Change() OrderChange {
	return OrderChange{Status: st.Status, PaymentIntentID: st.PaymentIntentID, At: st.UpdatedAt}
}

// Apply returns st as ch leaves it, and whether ch told st anything new:
// ch's status if the lifecycle leads from st's to it (Precedes), with
// UpdatedAt ch.At; ch's PaymentIntent if st has none. A change st already
// shows, or one older than st, leaves st as it is (the lifecycle has no
// cycle, so an older change names a status st's precedes, or st's own).
// So what a follower of the order shows only moves forward, whatever the
// order it learns of the order's changes in: events that arrived before
// a read of the order that already has them, a read from a replica behind
// the events, events delivered out of order. An Unknown change tells
// nothing.
func (st OrderState) Apply(ch OrderChange) (OrderState, bool) {
	if ch.Unknown {
		return st, false
	}
	changed := false
	if ch.Status != "" && st.Status.Precedes(ch.Status) {
		st.Status, st.UpdatedAt, changed = ch.Status, ch.At, true
	}
	if ch.PaymentIntentID != "" && st.PaymentIntentID == "" {
		st.PaymentIntentID, changed = ch.PaymentIntentID, true
	}
	return st, changed
}
