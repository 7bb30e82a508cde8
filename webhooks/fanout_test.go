package webhooks

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"boxoffice/bus"
	"boxoffice/catalog"
	"boxoffice/consumers"
	"boxoffice/dbtest"
	"boxoffice/natstest"
	"boxoffice/outbox"
	"boxoffice/purchase"
	"boxoffice/testkit"
)

// order creates an event of org and a pending order on it.
func (b *testBundle) order(t *testing.T, org uuid.UUID) (eventID, orderID, holdID uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	ev, err := catalog.New(b.pool).CreateEvent(ctx, catalog.EventParams{
		OrganizerID: org, Name: "show", StartsAt: time.Now().Add(time.Hour), Currency: "eur", Cell: "default",
		Sections: []catalog.Section{{Name: "A", Rows: 1, SeatsPerRow: 4, PriceMinor: 2500}},
	})
	require.NoError(t, err)
	var seats []uuid.UUID
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT (array_agg(id ORDER BY id))[1:2] FROM seats WHERE event_id = $1", ev.ID).Scan(&seats))
	h, err := purchase.NewService(b.pool, slog.New(slog.NewTextHandler(io.Discard, nil)), purchase.Config{}).Hold(ctx, purchase.HoldParams{
		UserID: uuid.New(), EventID: ev.ID, SeatIDs: seats, IdempotencyKey: uuid.NewString(), CorrelationID: "journey-1",
	})
	require.NoError(t, err)
	return ev.ID, h.OrderID, h.HoldID
}

// publish publishes env with msgID and returns its stream sequence.
func publish(t *testing.T, js jetstream.JetStream, env outbox.Envelope, msgID string) uint64 {
	t.Helper()
	raw, err := json.Marshal(env)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ack, err := js.Publish(ctx, env.Subject(), raw, jetstream.WithMsgID(msgID))
	require.NoError(t, err)
	return ack.Sequence
}

// waitSettled waits until the fan-out has acked every message up to stream
// sequence seq and has none pending or unacked: nothing it was sent can
// still store a message.
func waitSettled(t *testing.T, js jetstream.JetStream, seq uint64) {
	t.Helper()
	waitFor(t, 10*time.Second, "the fan-out to settle every event", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		cons, err := js.Consumer(ctx, bus.Stream, FanOutName)
		if err != nil {
			return false
		}
		info := cons.CachedInfo()
		return info.AckFloor.Stream >= seq && info.NumAckPending == 0 && info.NumPending == 0
	})
}

func event(t *testing.T, typ string, orderID uuid.UUID, payload any) outbox.Envelope {
	t.Helper()
	env, _, err := outbox.NewOrderEvent(typ, orderID, time.Now(), "journey-1", "", payload)
	require.NoError(t, err)
	return env
}

type storedMessage struct {
	EventType string
	Body      Body
	Raw       []byte
}

func (b *testBundle) messages(t *testing.T, org uuid.UUID) []storedMessage {
	t.Helper()
	ms, err := b.svc.Messages(context.Background(), org, MessageFilter{Limit: 100})
	require.NoError(t, err)
	out := make([]storedMessage, len(ms))
	for i, m := range ms {
		out[i] = storedMessage{EventType: m.EventType, Raw: m.Payload}
		require.NoError(t, json.Unmarshal(m.Payload, &out[i].Body))
	}
	return out
}

func TestFanOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ns := natstest.New(t)
	_, js := ns.Connect(t)
	org, otherOrg := uuid.New(), uuid.New()
	eventID, orderID, holdID := b.order(t, org)
	_, pendingOrder, _ := b.order(t, org)

	all := b.endpoint(t, org, "http://127.0.0.1:1/all", EndpointParams{})
	paidOnly := b.endpoint(t, org, "http://127.0.0.1:1/paid", EndpointParams{EventTypes: []string{EventOrderPaid}})
	disabled := b.endpoint(t, org, "http://127.0.0.1:1/off", EndpointParams{Disabled: true})
	foreign := b.endpoint(t, otherOrg, "http://127.0.0.1:1/foreign", EndpointParams{})

	c, err := NewFanOut(b.pool, js, consumers.Config{
		Logger: b.logger, Registerer: b.reg, BackoffBase: time.Millisecond, BackoffMax: 50 * time.Millisecond, MaxDeliver: 1000,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	paid := event(t, outbox.TypePaymentCaptured, orderID, outbox.PaymentCaptured{
		OrderID: orderID, PaymentIntentID: "pi_secret_internal", AmountReceived: 5000, ProviderEventID: "evt_1",
	})
	publish(t, js, event(t, outbox.TypeOrderConfirmed, orderID, outbox.OrderConfirmed{OrderID: orderID, HoldID: holdID}), uuid.NewString())
	publish(t, js, paid, paid.EventID.String())
	// The same fact again outside the stream's duplicate window (another
	// Nats-Msg-Id): the inbox makes it a no-op.
	publish(t, js, paid, uuid.NewString())
	// Not a public fact.
	publish(t, js, event(t, outbox.TypeCaptureRequested, orderID, outbox.CaptureRequested{OrderID: orderID}), uuid.NewString())
	// The hold expires: hold.expired and order.failed; a late decline of
	// the failed order makes no second order.failed.
	dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'failed' WHERE id = $1", orderID)
	publish(t, js, event(t, outbox.TypeHoldExpired, orderID, outbox.HoldExpired{OrderID: orderID, HoldID: holdID, SeatIDs: []uuid.UUID{}}), uuid.NewString())
	publish(t, js, event(t, outbox.TypePaymentFailed, orderID, outbox.PaymentFailed{OrderID: orderID, Code: "card_declined"}), uuid.NewString())

	waitFor(t, 10*time.Second, "four messages", func() bool { return len(b.messages(t, org)) == 4 })
	// A decline the saga has not applied yet waits for it: the fan-out
	// has handled it, and put it off, once it logs the retry.
	decline := event(t, outbox.TypePaymentFailed, pendingOrder, outbox.PaymentFailed{OrderID: pendingOrder, Code: "card_declined"})
	last := publish(t, js, decline, uuid.NewString())
	b.logs.WaitForLine(t, 10*time.Second, "the fan-out to put off the pending order's decline", func(l testkit.Line) bool {
		e, _ := l["error"].(string)
		return l["msg"] == "handler failed; retrying later" && l["event_id"] == decline.EventID.String() && strings.Contains(e, errNotYet.Error())
	})
	require.Len(t, b.messages(t, org), 4, "no order.failed while the order is still pending")
	dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'failed' WHERE id = $1", pendingOrder)
	waitFor(t, 10*time.Second, "the late order.failed", func() bool { return len(b.messages(t, org)) == 5 })
	waitSettled(t, js, last)

	msgs := b.messages(t, org)
	types := map[string]int{}
	for _, m := range msgs {
		types[m.EventType]++
		require.Equal(t, m.EventType, m.Body.Type)
		require.False(t, m.Body.Timestamp.IsZero())
		require.NotContains(t, string(m.Raw), "pi_secret_internal", "no provider ids in messages")
		require.NotContains(t, string(m.Raw), "evt_1")
	}
	require.Equal(t, map[string]int{EventOrderConfirmed: 1, EventOrderPaid: 1, EventHoldExpired: 1, EventOrderFailed: 2}, types)
	require.Empty(t, b.messages(t, otherOrg), "another organizer's endpoint gets nothing")

	for _, m := range msgs {
		if m.EventType == EventOrderPaid {
			var d OrderPaidData
			require.NoError(t, json.Unmarshal(m.Body.Data, &d))
			require.Equal(t, OrderPaidData{OrderData{orderID, eventID, 5000, "eur"}, 5000}, d)
		}
	}

	count := func(endpoint uuid.UUID) int64 {
		return dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1", endpoint)
	}
	require.Equal(t, int64(5), count(all.ID), "one delivery per message")
	require.Equal(t, int64(1), count(paidOnly.ID), "the filter holds")
	require.Zero(t, count(disabled.ID), "a disabled endpoint gets nothing new")
	require.Zero(t, count(foreign.ID))
	require.Equal(t, int64(5), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_messages"))
}

// TestEndToEnd: a domain event on JetStream reaches the organizer's
// receiver as a signed Standard Webhooks message, once.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ns := natstest.New(t)
	_, js := ns.Connect(t)
	org := uuid.New()
	eventID, orderID, holdID := b.order(t, org)
	rc := newReceiver(t, status(http.StatusNoContent))
	e := b.endpoint(t, org, rc.URL, EndpointParams{})

	c, err := NewFanOut(b.pool, js, consumers.Config{Logger: b.logger, Registerer: b.reg, BackoffBase: time.Millisecond, BackoffMax: 50 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	b.run(t, b.dispatcherConfig(), nil)

	env := event(t, outbox.TypeOrderConfirmed, orderID, outbox.OrderConfirmed{OrderID: orderID, HoldID: holdID})
	publish(t, js, env, env.EventID.String())
	var got request
	select {
	case got = <-rc.got:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no delivery")
	}
	wh, err := standardwebhooks.NewWebhook(e.Secret)
	require.NoError(t, err)
	require.NoError(t, wh.Verify(got.body, got.header))
	var body Body
	require.NoError(t, json.Unmarshal(got.body, &body))
	require.Equal(t, EventOrderConfirmed, body.Type)
	var data OrderConfirmedData
	require.NoError(t, json.Unmarshal(body.Data, &data))
	require.Equal(t, OrderConfirmedData{OrderData{orderID, eventID, 5000, "eur"}, holdID}, data)
	require.Equal(t, "application/json", got.header.Get("Content-Type"))
	require.Regexp(t, `^msg_[0-9a-f-]{36}$`, got.header.Get(HeaderID))
	// Fan-out and dispatch logs name the order and the journey.
	waitFor(t, 5*time.Second, "the delivery's log line", func() bool {
		return strings.Contains(b.logs.String(), `"msg":"webhook delivered"`)
	})
	for _, line := range strings.Split(b.logs.String(), "\n") {
		if strings.Contains(line, `"msg":"webhook delivered"`) || strings.Contains(line, `"msg":"webhook message stored"`) {
			require.Contains(t, line, `"order_id":"`+orderID.String()+`"`)
			require.Contains(t, line, got.header.Get(HeaderID))
		}
		if strings.Contains(line, `"msg":"webhook message stored"`) {
			require.Contains(t, line, `"correlation_id":"journey-1"`)
		}
	}
}
