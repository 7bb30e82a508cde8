package webhooks

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

func TestFanOut(t *testing.T) {
	t.Parallel()

	// Plan finds "nothing to send" by sourceFor before it decodes the
	// payload or looks at the order, so sourceFor must name every type
	// factsOf can make of an event, whatever the order's state.
	t.Run("SourceForCoversEveryFact", func(t *testing.T) {
		t.Parallel()
		order := uuid.New()
		payloads := map[string]any{
			outbox.TypeOrderConfirmed:  outbox.OrderConfirmed{OrderID: order, HoldID: uuid.New()},
			outbox.TypePaymentCaptured: outbox.PaymentCaptured{OrderID: order, AmountReceived: 5000},
			outbox.TypeTicketIssued:    outbox.TicketIssued{OrderID: order},
			outbox.TypeHoldExpired:     outbox.HoldExpired{OrderID: order, HoldID: uuid.New()},
			outbox.TypePaymentFailed:   outbox.PaymentFailed{OrderID: order, Code: "card_declined"},
			outbox.TypeOrderCanceled:   outbox.OrderCanceled{OrderID: order, Reason: "requested_by_customer"},
		}
		statuses := []purchase.OrderStatus{
			purchase.OrderPendingPayment, purchase.OrderAuthorized, purchase.OrderCapturePending, purchase.OrderPaid,
			purchase.OrderTicketed, purchase.OrderFailed, purchase.OrderCanceled, purchase.OrderRefunding, purchase.OrderRefunded,
		}
		require.Len(t, sourceFor, len(sourceTypes))
		for _, typ := range sourceTypes {
			var evs []outbox.Envelope
			if typ == outbox.TypePaymentRefunded {
				for _, amount := range []int64{1000, 5000} {
					ev, _, err := outbox.NewOrderEvent(typ, order, time.Now(), "c", "", outbox.PaymentRefunded{OrderID: order, AmountRefunded: amount})
					require.NoError(t, err)
					evs = append(evs, ev)
				}
			} else {
				ev, _, err := outbox.NewOrderEvent(typ, order, time.Now(), "c", "", payloads[typ])
				require.NoError(t, err)
				evs = append(evs, ev)
			}
			made := map[string]bool{}
			for _, ev := range evs {
				for _, st := range statuses {
					facts, err := factsOf(ev, orderSubject{status: string(st), amountMinor: 5000, currency: "eur"})
					if errors.Is(err, errNotYet) {
						continue
					}
					require.NoError(t, err)
					for _, f := range facts {
						made[f.eventType] = true
						require.Contains(t, sourceFor[typ], f.eventType, "%s in status %s", typ, st)
					}
				}
			}
			for _, pub := range sourceFor[typ] {
				require.True(t, made[pub], "%s never becomes %s", typ, pub)
			}
		}
	})

	// Plan decides each event of a batch from one read: nothing to send
	// when no endpoint of the organizer subscribes to a type the event
	// may become (before waiting for the saga), a permanent error for an
	// unknown order, and otherwise the messages its subscribed facts are.
	t.Run("PlansByWhatEndpointsSubscribe", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		costs := db.NewCostTracer()
		pool, err := db.NewPool(context.Background(), db.PoolConfig{URL: b.pool.Config().ConnString(), Tracer: costs})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		paidOnly, quiet := uuid.New(), uuid.New()
		b.endpoint(t, paidOnly, "http://127.0.0.1:1/paid", EndpointParams{EventTypes: []string{EventOrderPaid, EventDeliveryExhausted}})
		b.endpoint(t, paidOnly, "http://127.0.0.1:1/off", EndpointParams{Disabled: true})
		b.endpoint(t, quiet, "http://127.0.0.1:1/notices", EndpointParams{EventTypes: []string{EventEndpointDisabled}})
		paidOrder := pendingOrder(t, b, paidOnly)
		quietOrder := pendingOrder(t, b, quiet)
		event := func(typ string, order uuid.UUID, payload any) outbox.Envelope {
			ev, _, err := outbox.NewOrderEvent(typ, order, time.Now(), "c", "", payload)
			require.NoError(t, err)
			return ev
		}
		evs := []outbox.Envelope{
			event(outbox.TypePaymentCaptured, paidOrder, outbox.PaymentCaptured{OrderID: paidOrder, AmountReceived: 5000}),
			event(outbox.TypeOrderConfirmed, paidOrder, outbox.OrderConfirmed{OrderID: paidOrder}),
			event(outbox.TypePaymentFailed, paidOrder, outbox.PaymentFailed{OrderID: paidOrder}),
			event(outbox.TypePaymentCaptured, quietOrder, outbox.PaymentCaptured{OrderID: quietOrder, AmountReceived: 5000}),
			event(outbox.TypePaymentFailed, quietOrder, outbox.PaymentFailed{OrderID: quietOrder}),
			event(outbox.TypePaymentCaptured, uuid.New(), outbox.PaymentCaptured{}),
			event(outbox.TypeCaptureRequested, paidOrder, outbox.CaptureRequested{OrderID: paidOrder}),
		}
		ctx := db.WithRole(context.Background(), "fan-out")

		p, err := NewFanOut(pool, b.logger).Plan(ctx, evs)
		require.NoError(t, err)
		require.NoError(t, p.Err(0), "order.paid has a subscriber")
		require.ErrorIs(t, p.Err(1), ErrNothingToSend, "order.confirmed has none")
		require.ErrorIs(t, p.Err(2), ErrNothingToSend, "a decline has none, whatever the saga does")
		require.ErrorIs(t, p.Err(3), ErrNothingToSend, "notices are not facts")
		require.ErrorIs(t, p.Err(4), ErrNothingToSend)
		require.ErrorIs(t, p.Err(5), fault.ErrPermanent, "an unknown order")
		require.ErrorIs(t, p.Err(6), ErrNothingToSend, "not a public fact")
		cost := costs.Costs()
		require.Len(t, cost, 1)
		require.Equal(t, int64(1), cost[0].RoundTrips, "one read for the batch")

		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			return p.Store(ctx, tx, []uuid.UUID{evs[0].EventID, evs[1].EventID})
		}))
		require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_messages"))
		require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_deliveries"))
	})

	// Store joins the endpoints as they are in its transaction: one
	// disabled since Plan gets nothing (and a fact nobody subscribes to
	// any more is no message), one created since gets the messages
	// stored.
	t.Run("StoreJoinsTheEndpointsAsTheyAre", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org, gone := uuid.New(), uuid.New()
		first := b.endpoint(t, org, "http://127.0.0.1:1/first", EndpointParams{})
		lone := b.endpoint(t, gone, "http://127.0.0.1:1/lone", EndpointParams{})
		order, goneOrder := pendingOrder(t, b, org), pendingOrder(t, b, gone)
		evs := make([]outbox.Envelope, 2)
		for i, o := range []uuid.UUID{order, goneOrder} {
			var err error
			evs[i], _, err = outbox.NewOrderEvent(outbox.TypePaymentCaptured, o, time.Now(), "c", "", outbox.PaymentCaptured{OrderID: o, AmountReceived: 5000})
			require.NoError(t, err)
		}
		ctx := context.Background()
		p, err := NewFanOut(b.pool, b.logger).Plan(ctx, evs)
		require.NoError(t, err)
		require.NoError(t, p.Err(0))
		require.NoError(t, p.Err(1))

		second := b.endpoint(t, org, "http://127.0.0.1:1/second", EndpointParams{})
		_, err = b.svc.Update(ctx, gone, lone.ID, EndpointUpdate{Enabled: new(false)})
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			return p.Store(ctx, tx, []uuid.UUID{evs[0].EventID, evs[1].EventID})
		}))
		for _, e := range []uuid.UUID{first.ID, second.ID} {
			require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1", e))
		}
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_messages WHERE organizer_id = $1", gone))
		require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_messages"))

		// Stored again (a redelivery that found no inbox row): no second
		// message, no second delivery.
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			return p.Store(ctx, tx, []uuid.UUID{evs[0].EventID})
		}))
		require.Equal(t, int64(2), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_deliveries"))
	})

	// Two events of one batch that stand for one fact (an expiry, then a
	// decline, both failing the order) are one message: the first's.
	t.Run("OneFactOfTwoEventsIsOneMessage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		b.endpoint(t, org, "http://127.0.0.1:1/all", EndpointParams{})
		order := pendingOrder(t, b, org)
		dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'failed' WHERE id = $1", order)
		expired, _, err := outbox.NewOrderEvent(outbox.TypeHoldExpired, order, time.Now(), "c", "", outbox.HoldExpired{OrderID: order})
		require.NoError(t, err)
		declined, _, err := outbox.NewOrderEvent(outbox.TypePaymentFailed, order, time.Now(), "c", "", outbox.PaymentFailed{OrderID: order})
		require.NoError(t, err)
		ctx := context.Background()
		p, err := NewFanOut(b.pool, b.logger).Plan(ctx, []outbox.Envelope{expired, declined})
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			return p.Store(ctx, tx, []uuid.UUID{expired.EventID, declined.EventID})
		}))
		ms, err := b.svc.Messages(ctx, org, MessageFilter{Limit: 10})
		require.NoError(t, err)
		types := make([]string, len(ms))
		for i, m := range ms {
			types[i] = m.EventType
			if m.EventType == EventOrderFailed {
				require.Contains(t, string(m.Payload), `"reason":"hold_expired"`)
			}
		}
		slices.Sort(types)
		require.Equal(t, []string{EventHoldExpired, EventOrderFailed}, types)
	})
}

// pendingOrder is a new order, awaiting payment, on a new event of org.
func pendingOrder(t *testing.T, b *testBundle, org uuid.UUID) uuid.UUID {
	t.Helper()
	ev := fixture.NewEvent(t, b.pool, fixture.EventSpec{OrganizerID: org, Name: "show", SeatsPerRow: 2, PriceMinor: 2500})
	return fixture.Hold(t, b.pool, ev.ID, "journey-1", ev.SeatsByID()[:2]...).OrderID
}
