package purchase_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
)

func TestRefund(t *testing.T) {
	t.Parallel()

	paidOrder := func(t *testing.T, status string) (*purchase.Service, *testBundle, buyerOrder) {
		t.Helper()
		svc, b := setup(t)
		o := holdTwoSeats(t, svc, b)
		withIntent(t, b, o.hold.OrderID, "pi_paid")
		dbtest.Exec(t, b.pool, "UPDATE holds SET status = 'confirmed'")
		dbtest.Exec(t, b.pool, "UPDATE orders SET status = $1", status)
		return svc, b, o
	}

	t.Run("OrganizerRefundsPaidOrTicketedOrderOnce", func(t *testing.T) {
		t.Parallel()
		for _, st := range []string{"paid", "ticketed"} {
			svc, b, o := paidOrder(t, st)
			for range 2 {
				got, err := svc.Refund(context.Background(), b.event.OrganizerID, o.hold.OrderID, purchase.RefundOptions{})
				require.NoError(t, err, st)
				require.Equal(t, purchase.OrderState{ID: o.hold.OrderID, EventID: b.event.ID, Status: "refunding", UpdatedAt: got.UpdatedAt}, got)
			}
			require.Equal(t, []outbox.RefundRequested{{OrderID: o.hold.OrderID, PaymentIntentID: "pi_paid", Reason: purchase.ReasonRefundByOrganizer}},
				outboxPayloads[outbox.RefundRequested](t, b, o.hold.OrderID, outbox.TypeRefundRequested), st)
		}
	})

	t.Run("RefundedOrderIsReturnedAsIs", func(t *testing.T) {
		t.Parallel()
		svc, b, o := paidOrder(t, "refunded")
		got, err := svc.Refund(context.Background(), b.event.OrganizerID, o.hold.OrderID, purchase.RefundOptions{})
		require.NoError(t, err)
		require.Equal(t, purchase.OrderRefunded, got.Status)
		require.Empty(t, outboxPayloads[outbox.RefundRequested](t, b, o.hold.OrderID, outbox.TypeRefundRequested))
	})

	t.Run("OtherOrganizerOrBuyerGetsNotFound", func(t *testing.T) {
		t.Parallel()
		svc, b, o := paidOrder(t, "paid")
		for _, who := range []uuid.UUID{uuid.New(), o.buyer} {
			_, err := svc.Refund(context.Background(), who, o.hold.OrderID, purchase.RefundOptions{})
			require.ErrorIs(t, err, purchase.ErrOrderNotFound)
		}
		_, err := svc.Refund(context.Background(), b.event.OrganizerID, uuid.New(), purchase.RefundOptions{})
		require.ErrorIs(t, err, purchase.ErrOrderNotFound)
		require.Empty(t, outboxPayloads[outbox.RefundRequested](t, b, o.hold.OrderID, outbox.TypeRefundRequested))
	})

	t.Run("UnpaidOrderIsNotRefundable", func(t *testing.T) {
		t.Parallel()
		for _, st := range []string{"pending_payment", "capture_pending", "failed", "canceled"} {
			svc, b, o := paidOrder(t, st)
			_, err := svc.Refund(context.Background(), b.event.OrganizerID, o.hold.OrderID, purchase.RefundOptions{})
			require.ErrorIs(t, err, purchase.ErrOrderNotRefundable, st)
			require.Empty(t, outboxPayloads[outbox.RefundRequested](t, b, o.hold.OrderID, outbox.TypeRefundRequested), st)
		}
	})
}
