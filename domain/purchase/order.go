package purchase

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/sqlcgen"
)

// ErrOrderNotFound is returned for an order that does not exist or that
// belongs to someone else; callers cannot tell the two apart.
var ErrOrderNotFound = fault.New(fault.CodeNotFound, "order not found")

// Order is an order as its owner sees it.
type Order struct {
	ID            uuid.UUID
	EventID       uuid.UUID
	Status        OrderStatus
	AmountMinor   int64
	Currency      string
	CreatedAt     time.Time
	HoldID        uuid.UUID
	HoldStatus    HoldStatus
	HoldExpiresAt time.Time
	SeatIDs       []uuid.UUID
	// Payment is nil until the payments worker created the order's
	// PaymentIntent.
	Payment *Payment
	Tickets []OrderTicket
}

// Payment is an order's payment as its owner sees it.
type Payment struct {
	Provider string
	// PaymentIntentID is "" until the intent exists.
	PaymentIntentID string
	// ClientSecret is what the buyer's browser confirms the card with. It
	// is set only while the order awaits payment (OrderStatus.AwaitsPayment),
	// and never logged.
	ClientSecret string
	// Status is the provider's status of the intent, as last recorded.
	Status string
}

// OrderTicket is one ticket of an order.
type OrderTicket struct {
	ID        uuid.UUID
	SeatID    uuid.UUID
	IssuedAt  time.Time
	QRPayload string
	// RevokedAt is set once a refund revoked the ticket.
	RevokedAt *time.Time
}

// IntentOrder returns the order whose payment is the PaymentIntent
// intentID, if userID owns that order, else ErrOrderNotFound: the check a
// buyer's page makes before confirming the intent. One statement.
func (s *Service) IntentOrder(ctx context.Context, userID uuid.UUID, intentID string) (uuid.UUID, error) {
	id, err := sqlcgen.New().PaymentOrderByIntentForUser(ctx, s.read(), sqlcgen.PaymentOrderByIntentForUserParams{
		PaymentIntentID: intentID, UserID: userID,
	})
	if errors.Is(err, db.ErrNotFound) {
		return uuid.Nil, ErrOrderNotFound
	} else if err != nil {
		return uuid.Nil, fmt.Errorf("get order of payment intent: %w", err)
	}
	return id, nil
}

// Order returns the order with id if userID owns it, else ErrOrderNotFound.
func (s *Service) Order(ctx context.Context, userID, id uuid.UUID) (Order, error) {
	q := sqlcgen.New()
	row, err := q.OrderGetForUser(ctx, s.read(), sqlcgen.OrderGetForUserParams{ID: id, UserID: userID})
	if errors.Is(err, db.ErrNotFound) {
		return Order{}, ErrOrderNotFound
	} else if err != nil {
		return Order{}, fmt.Errorf("get order: %w", err)
	}
	o := Order{
		ID:            row.ID,
		EventID:       row.EventID,
		Status:        OrderStatus(row.Status),
		AmountMinor:   row.AmountMinor,
		Currency:      row.Currency,
		CreatedAt:     row.CreatedAt,
		HoldID:        row.HoldID,
		HoldStatus:    HoldStatus(row.HoldStatus),
		HoldExpiresAt: row.HoldExpiresAt,
	}
	if o.SeatIDs, err = q.HoldSeatListByHold(ctx, s.read(), row.HoldID); err != nil {
		return Order{}, fmt.Errorf("list hold seats: %w", err)
	}
	payment, err := q.PaymentGetByOrder(ctx, s.read(), id)
	switch {
	case err == nil:
		o.Payment = &Payment{Provider: payment.Provider, Status: payment.Status}
		if payment.PaymentIntentID != nil {
			o.Payment.PaymentIntentID = *payment.PaymentIntentID
		}
		if payment.ClientSecret != nil && o.Status.AwaitsPayment() {
			o.Payment.ClientSecret = *payment.ClientSecret
		}
	case !errors.Is(err, db.ErrNotFound):
		return Order{}, fmt.Errorf("get payment: %w", err)
	}
	tickets, err := q.TicketListByOrder(ctx, s.pool, id)
	if err != nil {
		return Order{}, fmt.Errorf("list tickets: %w", err)
	}
	o.Tickets = make([]OrderTicket, 0, len(tickets))
	for _, t := range tickets {
		ot := OrderTicket{ID: t.ID, SeatID: t.SeatID, IssuedAt: t.IssuedAt, RevokedAt: t.RevokedAt}
		if t.QrPayload != nil {
			ot.QRPayload = *t.QrPayload
		}
		o.Tickets = append(o.Tickets, ot)
	}
	return o, nil
}
