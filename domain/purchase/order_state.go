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
