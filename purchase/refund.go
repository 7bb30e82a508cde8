package purchase

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/db"
	"boxoffice/outbox"
	"boxoffice/sqlcgen"
)

// ErrOrderNotRefundable is returned by Refund for an order that was never
// paid (or whose payment is still being captured): there is nothing to
// refund yet.
var ErrOrderNotRefundable = errors.New("order cannot be refunded")

// ReasonRefundByOrganizer is the reason of the RefundRequested that
// Refund emits.
const ReasonRefundByOrganizer = "requested_by_organizer"

// Refund starts the refund of a paid or ticketed order, for the organizer
// of the order's event.
//
// In one transaction that locks the order row, a paid or ticketed order
// becomes refunding and RefundRequested (with the order's PaymentIntent)
// goes to the outbox; the payments consumer refunds at the provider, and
// the provider's webhook moves the order to refunded. In that same
// transaction the order gives up what it owns: a ticketed order's tickets
// are revoked (they stay, since a seat is ticketed at most once, ever, so
// those seats are not sold again); a paid order not ticketed yet has its
// confirmed hold released and its seats back on sale, and the tickets
// worker then issues none (it issues only for paid orders).
//
// An order already refunding or refunded changes nothing and is returned,
// so a retried request asks for one refund. Returns ErrOrderNotFound when
// organizerID does not organize the order's event, and
// ErrOrderNotRefundable for an order in any other state.
func (s *Service) Refund(ctx context.Context, organizerID, orderID uuid.UUID) (OrderState, error) {
	return db.WithTxV(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) (OrderState, error) {
		q := sqlcgen.New()
		order, err := q.OrderLockForOrganizer(ctx, tx, sqlcgen.OrderLockForOrganizerParams{ID: orderID, OrganizerID: organizerID})
		if err = db.Interpret(err); errors.Is(err, db.ErrNotFound) {
			return OrderState{}, ErrOrderNotFound
		} else if err != nil {
			return OrderState{}, fmt.Errorf("lock order: %w", err)
		}
		state := OrderState{ID: order.ID, EventID: order.EventID, Status: order.Status, UpdatedAt: order.UpdatedAt}
		switch order.Status {
		case "refunding", "refunded":
			return state, nil
		case "paid", "ticketed":
		default:
			return OrderState{}, ErrOrderNotRefundable
		}
		payment, err := q.PaymentIntentGetByOrder(ctx, tx, order.ID)
		if err = db.Interpret(err); err != nil {
			return OrderState{}, fmt.Errorf("get payment of %s order: %w", order.Status, err)
		}
		if payment.PaymentIntentID == nil || *payment.PaymentIntentID == "" {
			return OrderState{}, fmt.Errorf("%s order %s has no payment intent", order.Status, order.ID)
		}
		if err := giveUp(ctx, tx, order); err != nil {
			return OrderState{}, err
		}
		if n, err := q.OrderTransition(ctx, tx, sqlcgen.OrderTransitionParams{
			ID: order.ID, FromStatus: order.Status, ToStatus: "refunding",
		}); err != nil {
			return OrderState{}, fmt.Errorf("mark order refunding: %w", err)
		} else if n != 1 {
			return OrderState{}, fmt.Errorf("mark order refunding: order changed under its lock")
		}
		if err := recordOrderEvent(ctx, tx, outbox.TypeRefundRequested, order, time.Now(), outbox.RefundRequested{
			OrderID: order.ID, PaymentIntentID: *payment.PaymentIntentID, Reason: ReasonRefundByOrganizer,
		}); err != nil {
			return OrderState{}, err
		}
		state.Status, state.UpdatedAt = "refunding", time.Now()
		return state, nil
	})
}

// giveUp revokes the tickets of a ticketed order, or releases the
// confirmed hold of a paid one, whose row lock the caller holds. Lock
// order: order, hold, seats.
func giveUp(ctx context.Context, tx pgx.Tx, order sqlcgen.Order) error {
	q := sqlcgen.New()
	if order.Status == "ticketed" {
		if _, err := q.TicketRevokeByOrder(ctx, tx, order.ID); err != nil {
			return fmt.Errorf("revoke tickets: %w", err)
		}
		return nil
	}
	hold, err := q.HoldGetByOrderForUpdate(ctx, tx, order.ID)
	if err = db.Interpret(err); err != nil {
		return fmt.Errorf("lock hold of paid order: %w", err)
	}
	holds := []uuid.UUID{hold.ID}
	if _, err := q.HoldSeatLockSeats(ctx, tx, holds); err != nil {
		return fmt.Errorf("lock seats of hold: %w", err)
	}
	if _, err := q.HoldSeatReleaseByHolds(ctx, tx, holds); err != nil {
		return fmt.Errorf("release seats of hold: %w", err)
	}
	if _, err := q.HoldTransition(ctx, tx, sqlcgen.HoldTransitionParams{
		ID: hold.ID, FromStatuses: []string{"active", "confirmed"}, ToStatus: "released",
	}); err != nil {
		return fmt.Errorf("release hold: %w", err)
	}
	return nil
}

// RevokedTicket is a ticket a refund revoked.
type RevokedTicket struct {
	ID        uuid.UUID
	RevokedAt time.Time
}

// RevokedTickets lists the revoked tickets of an event for its organizer,
// oldest revocation first: the list door scanners check, since a revoked
// ticket's signed QR payload still verifies offline. It returns
// ErrEventNotFound when organizerID does not organize the event.
func (s *Service) RevokedTickets(ctx context.Context, organizerID, eventID uuid.UUID) ([]RevokedTicket, error) {
	q := sqlcgen.New()
	ev, err := q.EventGetByID(ctx, s.pool, eventID)
	if err = db.Interpret(err); errors.Is(err, db.ErrNotFound) || err == nil && ev.OrganizerID != organizerID {
		return nil, ErrEventNotFound
	} else if err != nil {
		return nil, fmt.Errorf("get event: %w", err)
	}
	rows, err := q.TicketListRevokedByEvent(ctx, s.pool, eventID)
	if err != nil {
		return nil, fmt.Errorf("list revoked tickets: %w", err)
	}
	out := make([]RevokedTicket, 0, len(rows))
	for _, r := range rows {
		out = append(out, RevokedTicket{ID: r.ID, RevokedAt: r.RevokedAt})
	}
	return out, nil
}
