package purchase

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"boxoffice/db"
	"boxoffice/sqlcgen"
)

// ErrOrderNotFound is returned for an order that does not exist or that
// belongs to someone else; callers cannot tell the two apart.
var ErrOrderNotFound = errors.New("order not found")

// Order is an order as its owner sees it.
type Order struct {
	ID            uuid.UUID
	EventID       uuid.UUID
	Status        string
	AmountMinor   int64
	Currency      string
	CreatedAt     time.Time
	HoldID        uuid.UUID
	HoldStatus    string
	HoldExpiresAt time.Time
	SeatIDs       []uuid.UUID
	Payment       *sqlcgen.Payment
	Tickets       []sqlcgen.Ticket
}

// IntentOrder returns the order whose payment is the PaymentIntent
// intentID, if userID owns that order, else ErrOrderNotFound: the check a
// buyer's page makes before confirming the intent. One statement.
func (s *Service) IntentOrder(ctx context.Context, userID uuid.UUID, intentID string) (uuid.UUID, error) {
	id, err := sqlcgen.New().PaymentOrderByIntentForUser(ctx, s.pool, sqlcgen.PaymentOrderByIntentForUserParams{
		PaymentIntentID: intentID, UserID: userID,
	})
	if err = db.Interpret(err); errors.Is(err, db.ErrNotFound) {
		return uuid.Nil, ErrOrderNotFound
	} else if err != nil {
		return uuid.Nil, fmt.Errorf("get order of payment intent: %w", err)
	}
	return id, nil
}

// Order returns the order with id if userID owns it, else ErrOrderNotFound.
func (s *Service) Order(ctx context.Context, userID, id uuid.UUID) (Order, error) {
	q := sqlcgen.New()
	row, err := q.OrderGetForUser(ctx, s.pool, sqlcgen.OrderGetForUserParams{ID: id, UserID: userID})
	if err = db.Interpret(err); errors.Is(err, db.ErrNotFound) {
		return Order{}, ErrOrderNotFound
	} else if err != nil {
		return Order{}, fmt.Errorf("get order: %w", err)
	}
	o := Order{
		ID:            row.ID,
		EventID:       row.EventID,
		Status:        row.Status,
		AmountMinor:   row.AmountMinor,
		Currency:      row.Currency,
		CreatedAt:     row.CreatedAt,
		HoldID:        row.HoldID,
		HoldStatus:    row.HoldStatus,
		HoldExpiresAt: row.HoldExpiresAt,
	}
	if o.SeatIDs, err = q.HoldSeatListByHold(ctx, s.pool, row.HoldID); err != nil {
		return Order{}, fmt.Errorf("list hold seats: %w", err)
	}
	payment, err := q.PaymentGetByOrder(ctx, s.pool, id)
	switch err = db.Interpret(err); {
	case err == nil:
		o.Payment = &payment
	case !errors.Is(err, db.ErrNotFound):
		return Order{}, fmt.Errorf("get payment: %w", err)
	}
	if o.Tickets, err = q.TicketListByOrder(ctx, s.pool, id); err != nil {
		return Order{}, fmt.Errorf("list tickets: %w", err)
	}
	return o, nil
}
