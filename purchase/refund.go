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
// the provider's webhook moves the order to refunded. Tickets and seats are
// left as they are.
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
