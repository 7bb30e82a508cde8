package purchase_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
)

// buyerOrder is a pending order of two seats held by buyer.
type buyerOrder struct {
	buyer uuid.UUID
	hold  purchase.Hold
	seats []uuid.UUID
}

func holdTwoSeats(t *testing.T, svc *purchase.Service, b *testBundle) buyerOrder {
	t.Helper()
	o := buyerOrder{buyer: uuid.New(), seats: b.seats[:2]}
	var err error
	o.hold, err = svc.Hold(context.Background(), purchase.HoldParams{
		UserID: o.buyer, EventID: b.event.ID, SeatIDs: o.seats, IdempotencyKey: uuid.NewString(), CorrelationID: "journey-1",
	})
	require.NoError(t, err)
	return o
}

// withIntent gives the order a payments row, as the payments consumer
// does once it created the PaymentIntent.
func withIntent(t *testing.T, b *testBundle, orderID uuid.UUID, intentID string) {
	t.Helper()
	dbtest.Exec(t, b.pool, `INSERT INTO payments (order_id, provider, payment_intent_id, client_secret, status, amount_minor, currency)
		VALUES ($1, 'sandbox', $2, $2 || '_secret_x', 'requires_payment_method', 5000, 'usd')`, orderID, intentID)
}

// outboxPayloads returns the payloads of the order's events of type typ.
func outboxPayloads[T any](t *testing.T, b *testBundle, orderID uuid.UUID, typ string) []T {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), "SELECT envelope FROM outbox WHERE aggregate_id = $1 AND event_type = $2 ORDER BY seq", orderID, typ)
	require.NoError(t, err)
	defer rows.Close()
	var out []T
	for rows.Next() {
		var raw []byte
		require.NoError(t, rows.Scan(&raw))
		var env outbox.Envelope
		require.NoError(t, json.Unmarshal(raw, &env))
		require.Equal(t, "journey-1", env.CorrelationID)
		var p T
		require.NoError(t, json.Unmarshal(env.Payload, &p))
		out = append(out, p)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestCancel(t *testing.T) {
	t.Parallel()

	t.Run("OwnerCancelsAndSeatsAreFreeAgain", func(t *testing.T) {
		t.Parallel()
		svc, b := setup(t)
		o := holdTwoSeats(t, svc, b)
		withIntent(t, b, o.hold.OrderID, "pi_1")

		got, err := svc.Cancel(context.Background(), o.buyer, o.hold.OrderID)
		require.NoError(t, err)
		require.Equal(t, purchase.OrderCanceled, got.Status)
		require.Equal(t, purchase.HoldReleased, got.HoldStatus)
		require.EqualValues(t, 0, dbtest.Count(t, b.pool, "SELECT count(*) FROM hold_seats WHERE released_at IS NULL"))

		// Someone else can hold the seats at once.
		_, err = svc.Hold(context.Background(), purchase.HoldParams{
			UserID: uuid.New(), EventID: b.event.ID, SeatIDs: o.seats, IdempotencyKey: "other",
		})
		require.NoError(t, err)

		require.Equal(t, []outbox.OrderCanceled{{OrderID: o.hold.OrderID, Reason: purchase.ReasonCanceledByBuyer}},
			outboxPayloads[outbox.OrderCanceled](t, b, o.hold.OrderID, outbox.TypeOrderCanceled))
		require.Equal(t, []outbox.AuthorizationCancelRequested{{OrderID: o.hold.OrderID, PaymentIntentID: "pi_1", Reason: purchase.ReasonCanceledByBuyer}},
			outboxPayloads[outbox.AuthorizationCancelRequested](t, b, o.hold.OrderID, outbox.TypeAuthorizationCancelRequested))
	})

	t.Run("CancelingTwiceEmitsOnce", func(t *testing.T) {
		t.Parallel()
		svc, b := setup(t)
		o := holdTwoSeats(t, svc, b)
		withIntent(t, b, o.hold.OrderID, "pi_1")
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { _, errs[i] = svc.Cancel(context.Background(), o.buyer, o.hold.OrderID) })
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		again, err := svc.Cancel(context.Background(), o.buyer, o.hold.OrderID)
		require.NoError(t, err)
		require.Equal(t, purchase.OrderCanceled, again.Status)
		require.Len(t, outboxPayloads[outbox.OrderCanceled](t, b, o.hold.OrderID, outbox.TypeOrderCanceled), 1)
		require.Len(t, outboxPayloads[outbox.AuthorizationCancelRequested](t, b, o.hold.OrderID, outbox.TypeAuthorizationCancelRequested), 1)
	})

	t.Run("NoIntentNoAuthorizationCancel", func(t *testing.T) {
		t.Parallel()
		svc, b := setup(t)
		o := holdTwoSeats(t, svc, b)
		_, err := svc.Cancel(context.Background(), o.buyer, o.hold.OrderID)
		require.NoError(t, err)
		require.Len(t, outboxPayloads[outbox.OrderCanceled](t, b, o.hold.OrderID, outbox.TypeOrderCanceled), 1)
		require.Empty(t, outboxPayloads[outbox.AuthorizationCancelRequested](t, b, o.hold.OrderID, outbox.TypeAuthorizationCancelRequested))
	})

	t.Run("AuthorizationCancelAlreadyRequestedIsNotRequestedAgain", func(t *testing.T) {
		t.Parallel()
		svc, b := setup(t)
		o := holdTwoSeats(t, svc, b)
		withIntent(t, b, o.hold.OrderID, "pi_1")
		dbtest.Exec(t, b.pool, "UPDATE orders SET authorization_cancel_requested_at = now()")
		_, err := svc.Cancel(context.Background(), o.buyer, o.hold.OrderID)
		require.NoError(t, err)
		require.Empty(t, outboxPayloads[outbox.AuthorizationCancelRequested](t, b, o.hold.OrderID, outbox.TypeAuthorizationCancelRequested))
	})

	t.Run("StrangerGetsNotFound", func(t *testing.T) {
		t.Parallel()
		svc, b := setup(t)
		o := holdTwoSeats(t, svc, b)
		_, err := svc.Cancel(context.Background(), uuid.New(), o.hold.OrderID)
		require.ErrorIs(t, err, purchase.ErrOrderNotFound)
		_, err = svc.Cancel(context.Background(), o.buyer, uuid.New())
		require.ErrorIs(t, err, purchase.ErrOrderNotFound)
		require.EqualValues(t, 2, dbtest.Count(t, b.pool, "SELECT count(*) FROM hold_seats WHERE released_at IS NULL"))
	})

	t.Run("OrderPastPaymentIsNotCancelable", func(t *testing.T) {
		t.Parallel()
		for _, st := range []string{"capture_pending", "paid", "ticketed", "failed", "refunding", "refunded"} {
			svc, b := setup(t)
			o := holdTwoSeats(t, svc, b)
			dbtest.Exec(t, b.pool, "UPDATE holds SET status = 'confirmed'")
			dbtest.Exec(t, b.pool, "UPDATE orders SET status = $1", st)
			_, err := svc.Cancel(context.Background(), o.buyer, o.hold.OrderID)
			require.ErrorIs(t, err, purchase.ErrOrderNotCancelable, st)
			require.EqualValues(t, 2, dbtest.Count(t, b.pool, "SELECT count(*) FROM hold_seats WHERE released_at IS NULL"), st)
			require.Empty(t, outboxPayloads[outbox.OrderCanceled](t, b, o.hold.OrderID, outbox.TypeOrderCanceled), st)
		}
	})
}
