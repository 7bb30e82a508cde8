package purchase_test

import (
	"context"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
)

// A refund of selected tickets (issue 17, item 6): the organizer refunds
// one of three tickets, then the rest. Each partial refund is recorded
// once with its seats' prices, its tickets revoked, the order kept
// ticketed; a retry, a foreign ticket or a race refunds nothing twice; the
// whole refund afterwards refunds what is left; and the provider's
// webhooks, in whatever order, confirm each refund and complete the
// order only when the charge is refunded in full.
func TestPartialRefund(t *testing.T) {
	t.Parallel()

	// ticketed is an order of three seats at 25.00, paid and ticketed.
	ticketed := func(t *testing.T) (*sagaBundle, uuid.UUID, uuid.UUID, string, []uuid.UUID) {
		t.Helper()
		b := newSagaBundle(t, 1, 6)
		h := b.hold(t, b.seats[0], b.seats[1], b.seats[2])
		intent := b.pay(t, h.OrderID)
		dbtest.Exec(t, b.pool, "UPDATE payments SET status = 'succeeded', client_secret = NULL WHERE order_id = $1", h.OrderID)
		dbtest.Exec(t, b.pool, "UPDATE holds SET status = 'confirmed' WHERE order_id = $1", h.OrderID)
		dbtest.Exec(t, b.pool, `INSERT INTO tickets (id, order_id, seat_id, event_id)
			SELECT gen_random_uuid(), h.order_id, hs.seat_id, s.event_id
			FROM hold_seats hs JOIN holds h ON h.id = hs.hold_id JOIN seats s ON s.id = hs.seat_id WHERE h.order_id = $1`, h.OrderID)
		dbtest.Exec(t, b.pool, "UPDATE hold_seats SET released_at = now() WHERE hold_id = $1", h.HoldID)
		dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'ticketed' WHERE id = $1", h.OrderID)
		var org uuid.UUID
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT organizer_id FROM events WHERE id = $1", b.eventID).Scan(&org))
		rows, err := b.pool.Query(context.Background(), "SELECT id FROM tickets WHERE order_id = $1 ORDER BY seat_id", h.OrderID)
		require.NoError(t, err)
		var ids []uuid.UUID
		for rows.Next() {
			var id uuid.UUID
			require.NoError(t, rows.Scan(&id))
			ids = append(ids, id)
		}
		require.NoError(t, rows.Err())
		require.Len(t, ids, 3)
		return b, org, h.OrderID, intent, ids
	}
	refunds := func(t *testing.T, b *sagaBundle, orderID uuid.UUID) []outbox.RefundRequested {
		t.Helper()
		var out []outbox.RefundRequested
		for _, ev := range b.events(t, orderID, outbox.TypeRefundRequested) {
			out = append(out, payload[outbox.RefundRequested](t, ev))
		}
		return out
	}
	refunded := func(t *testing.T, b *sagaBundle, orderID uuid.UUID, intent string, amount int64) {
		t.Helper()
		require.NoError(t, b.apply(t, b.saga.PaymentRefunded, b.event(t, outbox.TypePaymentRefunded, orderID,
			outbox.PaymentRefunded{OrderID: orderID, PaymentIntentID: intent, AmountRefunded: amount})))
	}
	status := func(t *testing.T, b *sagaBundle, orderID uuid.UUID) string {
		t.Helper()
		var s string
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT status FROM orders WHERE id = $1", orderID).Scan(&s))
		return s
	}
	ctx := context.Background()

	t.Run("OneTicketThenTheRest", func(t *testing.T) {
		t.Parallel()
		b, org, orderID, intent, tks := ticketed(t)

		for range 2 { // the second is a retry: nothing more
			got, err := b.svc.Refund(ctx, org, orderID, purchase.RefundOptions{TicketIDs: []uuid.UUID{tks[0]}, Resell: true})
			require.NoError(t, err)
			require.Equal(t, purchase.OrderTicketed, got.Status, "the order keeps its other tickets")
		}
		reqs := refunds(t, b, orderID)
		require.Len(t, reqs, 1)
		require.NotEqual(t, uuid.Nil, reqs[0].RefundID)
		require.Equal(t, outbox.RefundRequested{OrderID: orderID, PaymentIntentID: intent, Reason: purchase.ReasonRefundByOrganizer,
			RefundID: reqs[0].RefundID, AmountMinor: 2500}, reqs[0])
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM tickets WHERE order_id = $1 AND revoked_at IS NOT NULL AND resale_at IS NOT NULL", orderID))
		require.EqualValues(t, 2, dbtest.Count(t, b.pool, "SELECT count(*) FROM tickets WHERE order_id = $1 AND revoked_at IS NULL", orderID))

		// A ticket of another order, or none at all: nothing written.
		_, err := b.svc.Refund(ctx, org, orderID, purchase.RefundOptions{TicketIDs: []uuid.UUID{tks[1], uuid.New()}})
		require.ErrorIs(t, err, purchase.ErrTicketsNotInOrder)
		require.Len(t, refunds(t, b, orderID), 1)
		require.EqualValues(t, 2, dbtest.Count(t, b.pool, "SELECT count(*) FROM tickets WHERE order_id = $1 AND revoked_at IS NULL", orderID))

		// The rest, as a whole refund: what the partial one left.
		got, err := b.svc.Refund(ctx, org, orderID, purchase.RefundOptions{})
		require.NoError(t, err)
		require.Equal(t, purchase.OrderRefunding, got.Status)
		reqs = refunds(t, b, orderID)
		require.Len(t, reqs, 2)
		require.Equal(t, outbox.RefundRequested{OrderID: orderID, PaymentIntentID: intent, Reason: purchase.ReasonRefundByOrganizer}, reqs[1],
			"no amount: the provider refunds what is left")
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM tickets WHERE order_id = $1 AND revoked_at IS NULL", orderID))

		// The partial refund's webhook arrives late: it confirms that
		// refund and leaves the order refunding.
		refunded(t, b, orderID, intent, 2500)
		require.Equal(t, "refunding", status(t, b, orderID))
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM refunds WHERE order_id = $1 AND status = 'succeeded'", orderID))
		// The charge refunded in full completes the order.
		refunded(t, b, orderID, intent, 7500)
		require.Equal(t, "refunded", status(t, b, orderID))

	})

	t.Run("SelectingEveryTicketLeftIsTheWholeRefund", func(t *testing.T) {
		t.Parallel()
		b, org, orderID, intent, tks := ticketed(t)
		_, err := b.svc.Refund(ctx, org, orderID, purchase.RefundOptions{TicketIDs: tks[:1]})
		require.NoError(t, err)
		got, err := b.svc.Refund(ctx, org, orderID, purchase.RefundOptions{TicketIDs: tks})
		require.NoError(t, err)
		require.Equal(t, purchase.OrderRefunding, got.Status)
		reqs := refunds(t, b, orderID)
		require.Len(t, reqs, 2)
		require.Zero(t, reqs[1].AmountMinor, "the whole refund of what is left")
		// Webhooks out of order: the full charge first, then the partial.
		refunded(t, b, orderID, intent, 7500)
		refunded(t, b, orderID, intent, 2500)
		require.Equal(t, "refunded", status(t, b, orderID))
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM refunds WHERE order_id = $1 AND status = 'succeeded'", orderID))
	})

	t.Run("ConcurrentRefundsOfOneTicketRefundItOnce", func(t *testing.T) {
		t.Parallel()
		b, org, orderID, _, tks := ticketed(t)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = b.svc.Refund(ctx, org, orderID, purchase.RefundOptions{TicketIDs: []uuid.UUID{tks[2]}})
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.Len(t, refunds(t, b, orderID), 1)
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM refunds WHERE order_id = $1", orderID))
	})

	t.Run("OnlyATicketedOrderRefundsSelectedTickets", func(t *testing.T) {
		t.Parallel()
		b, org, orderID, _, tks := ticketed(t)
		dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'paid' WHERE id = $1", orderID)
		_, err := b.svc.Refund(ctx, org, orderID, purchase.RefundOptions{TicketIDs: tks[:1]})
		require.ErrorIs(t, err, purchase.ErrOrderNotRefundable)
		require.Empty(t, refunds(t, b, orderID))
		_, err = b.svc.Refund(ctx, uuid.New(), orderID, purchase.RefundOptions{TicketIDs: tks[:1]})
		require.ErrorIs(t, err, purchase.ErrOrderNotFound, "another organizer")
	})
}
