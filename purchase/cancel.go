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

// ErrOrderNotCancelable is returned by Cancel for an order past the point
// where its owner can give the seats back: payment was authorized or
// captured, or the order already failed.
var ErrOrderNotCancelable = errors.New("order cannot be canceled")

// ReasonCanceledByBuyer is the reason of the OrderCanceled and
// AuthorizationCancelRequested events that Cancel emits.
const ReasonCanceledByBuyer = "canceled_by_buyer"

// Cancel gives back the seats of an order awaiting payment, for its owner,
// and returns the order as Order does.
//
// In one transaction that locks the order row, an order in pending_payment
// becomes canceled, its hold released and the seats the hold still owns
// free for anyone; OrderCanceled goes to the outbox, and
// AuthorizationCancelRequested too when the order has a PaymentIntent (a
// PaymentIntent created concurrently is canceled by the saga when its
// PaymentIntentCreated finds the order canceled; one cancel request per
// order, whoever writes it first).
//
// Canceling a canceled order changes nothing and returns it. Returns
// ErrOrderNotFound when userID does not own the order, and
// ErrOrderNotCancelable for an order in any other state.
func (s *Service) Cancel(ctx context.Context, userID, orderID uuid.UUID) (Order, error) {
	err := db.WithTx(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) error {
		q := sqlcgen.New()
		order, err := q.OrderLockForOwner(ctx, tx, sqlcgen.OrderLockForOwnerParams{ID: orderID, UserID: userID})
		if err = db.Interpret(err); errors.Is(err, db.ErrNotFound) {
			return ErrOrderNotFound
		} else if err != nil {
			return fmt.Errorf("lock order: %w", err)
		}
		switch order.Status {
		case "canceled":
			return nil
		case "pending_payment":
		default:
			return ErrOrderNotCancelable
		}
		// Lock order: the order (above), then its hold, then its seats, as
		// every writer of an order's state does.
		hold, err := q.HoldGetByOrderForUpdate(ctx, tx, order.ID)
		if err != nil {
			return fmt.Errorf("lock hold: %w", err)
		}
		holdIDs := []uuid.UUID{hold.ID}
		if _, err := q.HoldSeatLockSeats(ctx, tx, holdIDs); err != nil {
			return fmt.Errorf("lock seats: %w", err)
		}
		if _, err := q.HoldSeatReleaseByHolds(ctx, tx, holdIDs); err != nil {
			return fmt.Errorf("release seats: %w", err)
		}
		// An expired hold the expiry worker has not reached yet is still
		// active; a hold is never confirmed while its order awaits payment.
		if _, err := q.HoldTransition(ctx, tx, sqlcgen.HoldTransitionParams{
			ID: hold.ID, FromStatuses: []string{"active"}, ToStatus: "released",
		}); err != nil {
			return fmt.Errorf("release hold: %w", err)
		}
		if n, err := q.OrderTransition(ctx, tx, sqlcgen.OrderTransitionParams{
			ID: order.ID, FromStatus: "pending_payment", ToStatus: "canceled",
		}); err != nil {
			return fmt.Errorf("cancel order: %w", err)
		} else if n != 1 {
			return fmt.Errorf("cancel order: order changed under its lock")
		}
		now := time.Now()
		if err := recordOrderEvent(ctx, tx, outbox.TypeOrderCanceled, order, now,
			outbox.OrderCanceled{OrderID: order.ID, Reason: ReasonCanceledByBuyer}); err != nil {
			return err
		}
		payment, err := q.PaymentIntentGetByOrder(ctx, tx, order.ID)
		switch err = db.Interpret(err); {
		case errors.Is(err, db.ErrNotFound):
			return nil
		case err != nil:
			return fmt.Errorf("get payment: %w", err)
		}
		if payment.PaymentIntentID == nil || *payment.PaymentIntentID == "" {
			return nil
		}
		// One cancel request per order, whoever notices first (see
		// migrations/00005_saga.sql).
		if n, err := q.OrderMarkAuthorizationCancelRequested(ctx, tx, order.ID); err != nil {
			return fmt.Errorf("stamp cancel request: %w", err)
		} else if n == 0 {
			return nil
		}
		return recordOrderEvent(ctx, tx, outbox.TypeAuthorizationCancelRequested, order, now,
			outbox.AuthorizationCancelRequested{OrderID: order.ID, PaymentIntentID: *payment.PaymentIntentID, Reason: ReasonCanceledByBuyer})
	})
	if err != nil {
		return Order{}, err
	}
	return s.Order(ctx, userID, orderID)
}

// recordOrderEvent writes an event about order to the outbox in tx, in the
// order's buyer journey.
func recordOrderEvent(ctx context.Context, tx pgx.Tx, eventType string, order sqlcgen.Order, at time.Time, payload any) error {
	env, raw, err := outbox.NewOrderEvent(eventType, order.ID, at, order.CorrelationID, "", payload)
	if err != nil {
		return err
	}
	return outbox.Insert(ctx, tx, env, raw)
}
