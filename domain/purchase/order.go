package purchase

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/platform/page"
	"boxoffice/platform/sliceutil"
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
	// LastDecline is the order's last declined payment attempt (nil: none).
	LastDecline *Decline
	// PaymentAttemptsLeft is how many more times the buyer may try to
	// pay while the order awaits payment (0 once it does not).
	PaymentAttemptsLeft int
	// HoldGraced is set when the hold was kept longer because its payment
	// was being confirmed (GraceForPayment); HoldExpiresAt includes it.
	HoldGraced bool
	// Refunds are the refunds of selected tickets, oldest first (a whole
	// refund is the order's status, not one of these).
	Refunds []Refund
}

// Refund is a refund of selected tickets of an order: requested until
// the provider reports the charge refunded that far, then succeeded.
type Refund struct {
	ID          uuid.UUID
	TicketIDs   []uuid.UUID
	AmountMinor int64
	Status      string
	RequestedAt time.Time
	SucceededAt *time.Time
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
	rows, err := sqlcgen.New().OrderGetForUser(ctx, s.read(), sqlcgen.OrderGetForUserParams{ID: id, UserID: userID})
	if err != nil {
		return Order{}, fmt.Errorf("get order: %w", err)
	}
	if len(rows) == 0 {
		return Order{}, ErrOrderNotFound
	}
	orders, err := complete(rows)
	if err != nil {
		return Order{}, err
	}
	return orders[0], nil
}

// OrderFilter selects a buyer's orders (Orders) or an event's
// (EventOrders).
type OrderFilter struct {
	// EventID, when not nil, keeps the orders of that event (Orders).
	EventID *uuid.UUID
	// UserID, when not nil, keeps the orders of that buyer (EventOrders).
	UserID *uuid.UUID
	// Statuses, when not empty, keeps the orders in one of them.
	Statuses []OrderStatus
	// Before, when not nil, continues a list after the page that ended
	// there.
	Before *page.Cursor
	// Limit is the most orders returned, 1 to 100; 0 means 50.
	Limit int
}

func (f OrderFilter) limit() int {
	if f.Limit <= 0 {
		return 50
	}
	return min(f.Limit, 100)
}

func (f OrderFilter) statuses() []string {
	return sliceutil.Map(f.Statuses, func(st OrderStatus) string { return string(st) })
}

func (f OrderFilter) before() (*time.Time, *uuid.UUID) {
	if f.Before == nil {
		return nil, nil
	}
	return &f.Before.CreatedAt, &f.Before.ID
}

// Orders returns userID's orders, newest first, as Order returns each:
// with its seats, payment (the client secret only while the order awaits
// payment) and tickets. The next page is the orders before the last one
// returned (Cursor). One statement, whatever the page size.
func (s *Service) Orders(ctx context.Context, userID uuid.UUID, f OrderFilter) ([]Order, error) {
	beforeAt, beforeID := f.before()
	rows, err := sqlcgen.New().OrderListForUser(ctx, s.read(), sqlcgen.OrderListForUserParams{
		UserID: userID, EventID: f.EventID, Statuses: f.statuses(),
		BeforeCreatedAt: beforeAt, BeforeID: beforeID, MaxRows: int32(f.limit()),
	})
	if err != nil {
		return nil, fmt.Errorf("list orders: %w", err)
	}
	return complete(rows)
}

// Cursor is the position of o in a list of orders: the next page starts
// after it.
func (o Order) Cursor() page.Cursor { return page.Cursor{CreatedAt: o.CreatedAt, ID: o.ID} }

// complete makes Orders of rows, which carry their seats, payment,
// tickets and refunds (the view order_details).
func complete(rows []sqlcgen.OrderDetail) ([]Order, error) {
	orders := make([]Order, len(rows))
	for i, row := range rows {
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
			SeatIDs:       row.SeatIds,
			Tickets:       []OrderTicket{},
			Refunds:       []Refund{},
			HoldGraced:    row.HoldPaymentGraceAt != nil,
		}
		if o.SeatIDs == nil {
			o.SeatIDs = []uuid.UUID{}
		}
		if row.LastDeclineCode != nil && row.LastDeclinedAt != nil {
			o.LastDecline = &Decline{Code: *row.LastDeclineCode, Message: DeclineMessage(*row.LastDeclineCode), At: *row.LastDeclinedAt}
		}
		if o.Status.AwaitsPayment() {
			o.PaymentAttemptsLeft = max(attemptsAllowed(row.PaymentAttempts)-int(row.PaymentDeclines), 0)
		}
		if row.PaymentProvider != nil && row.PaymentStatus != nil {
			o.Payment = &Payment{Provider: *row.PaymentProvider, Status: *row.PaymentStatus}
			if row.PaymentIntentID != nil {
				o.Payment.PaymentIntentID = *row.PaymentIntentID
			}
			if row.PaymentClientSecret != nil && o.Status.AwaitsPayment() {
				o.Payment.ClientSecret = *row.PaymentClientSecret
			}
		}
		var tickets []struct {
			ID        uuid.UUID  `json:"id"`
			SeatID    uuid.UUID  `json:"seat_id"`
			IssuedAt  time.Time  `json:"issued_at"`
			RevokedAt *time.Time `json:"revoked_at"`
			QRPayload *string    `json:"qr_payload"`
		}
		if err := json.Unmarshal(row.Tickets, &tickets); err != nil {
			return nil, fmt.Errorf("decode tickets of order %s: %w", row.ID, err)
		}
		for _, t := range tickets {
			ot := OrderTicket{ID: t.ID, SeatID: t.SeatID, IssuedAt: t.IssuedAt, RevokedAt: t.RevokedAt}
			if t.QRPayload != nil {
				ot.QRPayload = *t.QRPayload
			}
			o.Tickets = append(o.Tickets, ot)
		}
		var refunds []struct {
			ID          uuid.UUID   `json:"id"`
			TicketIDs   []uuid.UUID `json:"ticket_ids"`
			AmountMinor int64       `json:"amount_minor"`
			Status      string      `json:"status"`
			RequestedAt time.Time   `json:"requested_at"`
			SucceededAt *time.Time  `json:"succeeded_at"`
		}
		if err := json.Unmarshal(row.Refunds, &refunds); err != nil {
			return nil, fmt.Errorf("decode refunds of order %s: %w", row.ID, err)
		}
		for _, r := range refunds {
			o.Refunds = append(o.Refunds, Refund{ID: r.ID, TicketIDs: r.TicketIDs, AmountMinor: r.AmountMinor,
				Status: r.Status, RequestedAt: r.RequestedAt, SucceededAt: r.SucceededAt})
		}
		orders[i] = o
	}
	return orders, nil
}
