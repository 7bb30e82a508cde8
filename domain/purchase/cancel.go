package purchase

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/platform/outbox"
	"boxoffice/sqlcgen"
)

// ErrOrderNotCancelable is returned by Cancel for an order past the point
// where its owner can give the seats back: payment was authorized or
// captured, or the order already failed.
var ErrOrderNotCancelable = fault.New(fault.CodeConflict, "order cannot be canceled")

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
		row, err := sqlcgen.New().OrderLockForOwner(ctx, tx, sqlcgen.OrderLockForOwnerParams{ID: orderID, UserID: userID})
		if errors.Is(err, db.ErrNotFound) {
			return ErrOrderNotFound
		} else if err != nil {
			return fmt.Errorf("lock order: %w", err)
		}
		o := newOrderTx(tx, row, Cause{})
		switch {
		case o.Status() == OrderCanceled:
			return nil
		case !o.Status().AwaitsPayment():
			return ErrOrderNotCancelable
		}
		if err := o.LockHold(ctx); err != nil {
			return err
		}
		if _, err := o.ReleaseSeats(ctx); err != nil {
			return err
		}
		// An expired hold the expiry worker has not reached yet is still
		// active; a hold is never confirmed while its order awaits payment.
		if o.HoldStatus() == HoldActive {
			if err := o.MoveHold(ctx, HoldReleased); err != nil {
				return err
			}
		}
		if err := o.Move(ctx, OrderCanceled); err != nil {
			return err
		}
		if err := o.Emit(ctx, outbox.TypeOrderCanceled, outbox.OrderCanceled{OrderID: o.ID(), Reason: ReasonCanceledByBuyer}); err != nil {
			return err
		}
		_, err = o.RequestCancel(ctx, "", ReasonCanceledByBuyer)
		return err
	})
	if err != nil {
		return Order{}, err
	}
	return s.Order(ctx, userID, orderID)
}
