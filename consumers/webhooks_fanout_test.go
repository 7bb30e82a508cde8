package consumers

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"boxoffice/domain/purchase"
	"boxoffice/domain/webhooks"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
	"boxoffice/platform/outbox"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
	"boxoffice/testkit/natstest"
)

// The webhooks fan-out consumer's tests, moved here from package webhooks
// with the consumer (webhooks cannot import this package).

// errNotYet is the text of the fan-out's retry of an event (a payment failure, a refund) the
// saga has not applied yet (webhooks' errNotYet).
const errNotYet = "the saga has not applied the event to the order yet"

// fanOutBundle is a test's database, a logger whose output is scanned for
// every endpoint secret when the test ends, and a webhooks Service that
// allows private addresses (the receivers are httptest servers on
// loopback).
type fanOutBundle struct {
	pool    *pgxpool.Pool
	logs    *testkit.Log
	logger  *slog.Logger
	reg     *prometheus.Registry
	svc     *webhooks.Service
	mu      sync.Mutex
	secrets []string
}

// fanOutKeys seals the endpoint secrets of these tests.
var fanOutKeys = func() *webhooks.Keyring {
	k, err := webhooks.ParseKeyring("test:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{5}, webhooks.KeyringKeyBytes)))
	if err != nil {
		panic(err)
	}
	return k
}()

func setupFanOut(t *testing.T) *fanOutBundle {
	t.Helper()
	return newFanOutBundle(t, dbtest.New(t))
}

// setupFanOutTraced is setupFanOut on a pool whose work the returned
// tracer counts, by role.
func setupFanOutTraced(t *testing.T) (*fanOutBundle, *db.CostTracer) {
	t.Helper()
	pool, costs := dbtest.NewTraced(t)
	return newFanOutBundle(t, pool), costs
}

func newFanOutBundle(t *testing.T, pool *pgxpool.Pool) *fanOutBundle {
	t.Helper()
	b := &fanOutBundle{pool: pool, logs: testkit.NewLog(t), reg: prometheus.NewRegistry()}
	b.logger = b.logs.Logger
	b.svc = webhooks.NewService(b.pool, webhooks.ServiceConfig{Guard: &webhooks.Guard{AllowPrivate: true}, Keys: fanOutKeys, Logger: b.logger})
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, s := range b.secrets {
			// The endpoint secret, and its key without the prefix.
			b.logs.RequireNoSecrets(t, s, s[len(webhooks.SecretPrefix):])
		}
	})
	return b
}

// endpoint creates an endpoint of organizer org for url.
func (b *fanOutBundle) endpoint(t *testing.T, org uuid.UUID, url string, p webhooks.EndpointParams) webhooks.Endpoint {
	t.Helper()
	p.URL = url
	e, err := b.svc.Create(context.Background(), org, p)
	require.NoError(t, err)
	require.NotEmpty(t, e.Secret)
	b.mu.Lock()
	b.secrets = append(b.secrets, e.Secret)
	b.mu.Unlock()
	return e
}

// runDispatcher starts a dispatcher in a fast test configuration and stops
// it when the test ends.
func (b *fanOutBundle) runDispatcher(t *testing.T) {
	t.Helper()
	d, err := webhooks.NewDispatcher(b.pool, webhooks.DispatcherConfig{
		Guard:         &webhooks.Guard{AllowPrivate: true},
		Keys:          fanOutKeys,
		RetrySchedule: []time.Duration{0, 100 * time.Millisecond, 400 * time.Millisecond, time.Second},
		Timeout:       2 * time.Second,
		Lease:         4 * time.Second,
		PollInterval:  10 * time.Millisecond,
		BusyDelay:     50 * time.Millisecond,
		FlushInterval: 5 * time.Millisecond,
		Logger:        b.logger,
		Registerer:    b.reg,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		require.NoError(t, d.Run(ctx))
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// fanOutRequest is what a receiver saw.
type fanOutRequest struct {
	header http.Header
	body   []byte
}

// fanOutReceiver is an httptest server that answers code and passes on
// every request.
type fanOutReceiver struct {
	*httptest.Server
	got chan fanOutRequest
}

func newFanOutReceiver(t *testing.T, code int) *fanOutReceiver {
	t.Helper()
	rc := &fanOutReceiver{got: make(chan fanOutRequest, 1000)}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.got <- fanOutRequest{header: r.Header.Clone(), body: body}
		w.WriteHeader(code)
	}))
	t.Cleanup(rc.Close)
	return rc
}

// waitForFanOut polls cond until it holds or the timeout passes.
func waitForFanOut(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNow(t, "timed out waiting for "+what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// order creates an event of org and a pending order on it.
func (b *fanOutBundle) order(t *testing.T, org uuid.UUID) (eventID, orderID, holdID uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	ev := fixture.NewEvent(t, b.pool, fixture.EventSpec{OrganizerID: org, Name: "show", StartsAt: time.Now().Add(time.Hour), SeatsPerRow: 4, PriceMinor: 2500})
	seats := ev.SeatsByID()[:2]
	h, err := purchase.NewService(b.pool, slog.New(slog.NewTextHandler(io.Discard, nil)), purchase.Config{}).Hold(ctx, purchase.HoldParams{
		UserID: uuid.New(), EventID: ev.ID, SeatIDs: seats, IdempotencyKey: uuid.NewString(), CorrelationID: "journey-1",
	})
	require.NoError(t, err)
	return ev.ID, h.OrderID, h.HoldID
}

// publish publishes env with msgID and returns its stream sequence.
func publishEvent(t *testing.T, js jetstream.JetStream, env outbox.Envelope, msgID string) uint64 {
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
func waitFanOutSettled(t *testing.T, js jetstream.JetStream, seq uint64) {
	t.Helper()
	waitForFanOut(t, 10*time.Second, "the fan-out to settle every event", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		cons, err := js.Consumer(ctx, bus.Stream, WebhooksFanOutName)
		if err != nil {
			return false
		}
		info := cons.CachedInfo()
		return info.AckFloor.Stream >= seq && info.NumAckPending == 0 && info.NumPending == 0
	})
}

func fanOutEvent(t *testing.T, typ string, orderID uuid.UUID, payload any) outbox.Envelope {
	t.Helper()
	env, _, err := outbox.NewOrderEvent(typ, orderID, time.Now(), "journey-1", "", payload)
	require.NoError(t, err)
	return env
}

type storedMessage struct {
	EventType string
	Body      webhooks.Body
	Raw       []byte
}

func (b *fanOutBundle) messages(t *testing.T, org uuid.UUID) []storedMessage {
	t.Helper()
	ms, err := b.svc.Messages(context.Background(), org, webhooks.MessageFilter{Limit: 100})
	require.NoError(t, err)
	out := make([]storedMessage, len(ms))
	for i, m := range ms {
		out[i] = storedMessage{EventType: m.EventType, Raw: m.Payload}
		require.NoError(t, json.Unmarshal(m.Payload, &out[i].Body))
	}
	return out
}

func TestWebhooksFanOut(t *testing.T) {
	t.Parallel()
	b := setupFanOut(t)
	ns := natstest.New(t)
	_, js := ns.Connect(t)
	org, otherOrg := uuid.New(), uuid.New()
	eventID, orderID, holdID := b.order(t, org)
	_, pendingOrder, _ := b.order(t, org)

	all := b.endpoint(t, org, "http://127.0.0.1:1/all", webhooks.EndpointParams{})
	paidOnly := b.endpoint(t, org, "http://127.0.0.1:1/paid", webhooks.EndpointParams{EventTypes: []string{webhooks.EventOrderPaid}})
	disabled := b.endpoint(t, org, "http://127.0.0.1:1/off", webhooks.EndpointParams{Disabled: true})
	foreign := b.endpoint(t, otherOrg, "http://127.0.0.1:1/foreign", webhooks.EndpointParams{})

	c, err := NewWebhooksFanOut(b.pool, js, Config{
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

	paid := fanOutEvent(t, outbox.TypePaymentCaptured, orderID, outbox.PaymentCaptured{
		OrderID: orderID, PaymentIntentID: "pi_secret_internal", AmountReceived: 5000, ProviderEventID: "evt_1",
	})
	publishEvent(t, js, fanOutEvent(t, outbox.TypeOrderConfirmed, orderID, outbox.OrderConfirmed{OrderID: orderID, HoldID: holdID}), uuid.NewString())
	publishEvent(t, js, paid, paid.EventID.String())
	// The same fact again outside the stream's duplicate window (another
	// Nats-Msg-Id): the inbox makes it a no-op.
	publishEvent(t, js, paid, uuid.NewString())
	// Not a public fact.
	publishEvent(t, js, fanOutEvent(t, outbox.TypeCaptureRequested, orderID, outbox.CaptureRequested{OrderID: orderID}), uuid.NewString())
	// The hold expires: hold.expired and order.failed; a late decline of
	// the failed order makes no second order.failed.
	dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'failed' WHERE id = $1", orderID)
	publishEvent(t, js, fanOutEvent(t, outbox.TypeHoldExpired, orderID, outbox.HoldExpired{OrderID: orderID, HoldID: holdID, SeatIDs: []uuid.UUID{}}), uuid.NewString())
	publishEvent(t, js, fanOutEvent(t, outbox.TypePaymentFailed, orderID, outbox.PaymentFailed{OrderID: orderID, Code: "card_declined"}), uuid.NewString())

	waitForFanOut(t, 10*time.Second, "four messages", func() bool { return len(b.messages(t, org)) == 4 })
	// A decline the saga has not applied yet waits for it: the fan-out
	// has handled it, and put it off, once it logs the retry.
	decline := fanOutEvent(t, outbox.TypePaymentFailed, pendingOrder, outbox.PaymentFailed{OrderID: pendingOrder, Code: "card_declined"})
	last := publishEvent(t, js, decline, uuid.NewString())
	b.logs.WaitForLine(t, 10*time.Second, "the fan-out to put off the pending order's decline", func(l testkit.Line) bool {
		e, _ := l["error"].(string)
		return l["msg"] == "handler failed; retrying later" && l["event_id"] == decline.EventID.String() && strings.Contains(e, errNotYet)
	})
	require.Len(t, b.messages(t, org), 4, "no order.failed while the order is still pending")
	dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'failed' WHERE id = $1", pendingOrder)
	waitForFanOut(t, 10*time.Second, "the late order.failed", func() bool { return len(b.messages(t, org)) == 5 })
	waitFanOutSettled(t, js, last)

	msgs := b.messages(t, org)
	types := map[string]int{}
	for _, m := range msgs {
		types[m.EventType]++
		require.Equal(t, m.EventType, m.Body.Type)
		require.False(t, m.Body.Timestamp.IsZero())
		require.NotContains(t, string(m.Raw), "pi_secret_internal", "no provider ids in messages")
		require.NotContains(t, string(m.Raw), "evt_1")
	}
	require.Equal(t, map[string]int{webhooks.EventOrderConfirmed: 1, webhooks.EventOrderPaid: 1, webhooks.EventHoldExpired: 1, webhooks.EventOrderFailed: 2}, types)
	require.Empty(t, b.messages(t, otherOrg), "another organizer's endpoint gets nothing")

	for _, m := range msgs {
		if m.EventType == webhooks.EventOrderPaid {
			var d webhooks.OrderPaidData
			require.NoError(t, json.Unmarshal(m.Body.Data, &d))
			require.Equal(t, webhooks.OrderPaidData{OrderData: webhooks.OrderData{OrderID: orderID, EventID: eventID, AmountMinor: 5000, Currency: "eur"}, AmountReceived: 5000}, d)
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

// Refunds as organizers see them: a refund of selected tickets is
// order.partially_refunded with the charge's refunded total; the charge
// refunded in full is order.refunded, put off while the saga has not made
// the order refunded yet.
func TestWebhooksFanOutRefunds(t *testing.T) {
	t.Parallel()
	b := setupFanOut(t)
	ns := natstest.New(t)
	_, js := ns.Connect(t)
	org := uuid.New()
	_, orderID, _ := b.order(t, org)
	b.endpoint(t, org, "http://127.0.0.1:1/all", webhooks.EndpointParams{})
	c, err := NewWebhooksFanOut(b.pool, js, Config{
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
	refunded := func(amount int64) outbox.Envelope {
		return fanOutEvent(t, outbox.TypePaymentRefunded, orderID, outbox.PaymentRefunded{OrderID: orderID, PaymentIntentID: "pi_x", AmountRefunded: amount})
	}

	dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'ticketed' WHERE id = $1", orderID)
	publishEvent(t, js, refunded(2000), uuid.NewString())
	waitForFanOut(t, 10*time.Second, "order.partially_refunded", func() bool { return len(b.messages(t, org)) == 1 })

	dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'refunding' WHERE id = $1", orderID)
	full := refunded(5000)
	last := publishEvent(t, js, full, uuid.NewString())
	b.logs.WaitForLine(t, 10*time.Second, "the fan-out to put off the full refund", func(l testkit.Line) bool {
		e, _ := l["error"].(string)
		return l["msg"] == "handler failed; retrying later" && l["event_id"] == full.EventID.String() && strings.Contains(e, errNotYet)
	})
	require.Len(t, b.messages(t, org), 1, "no order.refunded while the order is refunding")
	dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'refunded' WHERE id = $1", orderID)
	waitForFanOut(t, 10*time.Second, "order.refunded", func() bool { return len(b.messages(t, org)) == 2 })
	waitFanOutSettled(t, js, last)

	got := map[string]int64{}
	for _, m := range b.messages(t, org) {
		var d webhooks.OrderRefundedData
		require.NoError(t, json.Unmarshal(m.Body.Data, &d))
		got[m.EventType] = d.AmountRefunded
	}
	require.Equal(t, map[string]int64{webhooks.EventOrderPartiallyRefunded: 2000, webhooks.EventOrderRefunded: 5000}, got)
}

// TestWebhooksFanOutEndToEnd: a domain event on JetStream reaches the organizer's
// receiver as a signed Standard Webhooks message, once.
func TestWebhooksFanOutEndToEnd(t *testing.T) {
	t.Parallel()
	b := setupFanOut(t)
	ns := natstest.New(t)
	_, js := ns.Connect(t)
	org := uuid.New()
	eventID, orderID, holdID := b.order(t, org)
	rc := newFanOutReceiver(t, http.StatusNoContent)
	e := b.endpoint(t, org, rc.URL, webhooks.EndpointParams{})

	c, err := NewWebhooksFanOut(b.pool, js, Config{Logger: b.logger, Registerer: b.reg, BackoffBase: time.Millisecond, BackoffMax: 50 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	b.runDispatcher(t)

	env := fanOutEvent(t, outbox.TypeOrderConfirmed, orderID, outbox.OrderConfirmed{OrderID: orderID, HoldID: holdID})
	publishEvent(t, js, env, env.EventID.String())
	var got fanOutRequest
	select {
	case got = <-rc.got:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "no delivery")
	}
	wh, err := standardwebhooks.NewWebhook(e.Secret)
	require.NoError(t, err)
	require.NoError(t, wh.Verify(got.body, got.header))
	var body webhooks.Body
	require.NoError(t, json.Unmarshal(got.body, &body))
	require.Equal(t, webhooks.EventOrderConfirmed, body.Type)
	var data webhooks.OrderConfirmedData
	require.NoError(t, json.Unmarshal(body.Data, &data))
	require.Equal(t, webhooks.OrderConfirmedData{OrderData: webhooks.OrderData{OrderID: orderID, EventID: eventID, AmountMinor: 5000, Currency: "eur"}, HoldID: holdID}, data)
	require.Equal(t, "application/json", got.header.Get("Content-Type"))
	require.Regexp(t, `^msg_[0-9a-f-]{36}$`, got.header.Get(webhooks.HeaderID))
	// Fan-out and dispatch logs name the order and the journey.
	waitForFanOut(t, 5*time.Second, "the delivery's log line", func() bool {
		return strings.Contains(b.logs.String(), `"msg":"webhook delivered"`)
	})
	for _, line := range strings.Split(b.logs.String(), "\n") {
		if strings.Contains(line, `"msg":"webhook delivered"`) || strings.Contains(line, `"msg":"webhook message stored"`) {
			require.Contains(t, line, `"order_id":"`+orderID.String()+`"`)
			require.Contains(t, line, got.header.Get(webhooks.HeaderID))
		}
		if strings.Contains(line, `"msg":"webhook message stored"`) {
			require.Contains(t, line, `"correlation_id":"journey-1"`)
		}
	}
}

// sourceEvent is the i-th of a run of events about orderID: in turn
// order.confirmed, order.paid and ticket.issued, each its own fact.
func sourceEvent(t *testing.T, i int, orderID, holdID uuid.UUID) outbox.Envelope {
	t.Helper()
	switch i % 3 {
	case 0:
		return fanOutEvent(t, outbox.TypeOrderConfirmed, orderID, outbox.OrderConfirmed{OrderID: orderID, HoldID: holdID})
	case 1:
		return fanOutEvent(t, outbox.TypePaymentCaptured, orderID, outbox.PaymentCaptured{OrderID: orderID, AmountReceived: 5000})
	}
	return fanOutEvent(t, outbox.TypeTicketIssued, orderID, outbox.TicketIssued{OrderID: orderID, TicketIDs: []uuid.UUID{uuid.New()}})
}

// The fan-out's database work for a batch does not grow with the batch:
// when no endpoint subscribes to any of its events, one read and no
// transaction (the messages are acked with no inbox row); when some do,
// that read and one transaction of three statements (BEGIN, the inbox
// rows, the messages with their deliveries, COMMIT), for one event as for
// twelve.
func TestWebhooksFanOutRoundTrips(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 12} {
		for _, subscribed := range []bool{false, true} {
			t.Run(fmt.Sprintf("Subscribed=%t/Events=%d", subscribed, n), func(t *testing.T) {
				t.Parallel()
				b, costs := setupFanOutTraced(t)
				ns := natstest.New(t)
				_, js := ns.Connect(t)
				org, otherOrg := uuid.New(), uuid.New()
				// Another organizer's endpoint is nobody's subscriber here.
				b.endpoint(t, otherOrg, "http://127.0.0.1:1/foreign", webhooks.EndpointParams{})
				if subscribed {
					b.endpoint(t, org, "http://127.0.0.1:1/all", webhooks.EndpointParams{})
					b.endpoint(t, org, "http://127.0.0.1:1/paid", webhooks.EndpointParams{EventTypes: []string{webhooks.EventOrderPaid}})
				}
				// Every other event is about an order of an organizer with
				// no endpoint at all.
				_, orderID, holdID := b.order(t, org)
				_, quietOrder, quietHold := b.order(t, uuid.New())
				var last uint64
				var events, paid int64
				for i := range n {
					if i%2 == 1 {
						last = publishEvent(t, js, sourceEvent(t, i/2, quietOrder, quietHold), uuid.NewString())
						continue
					}
					ev := sourceEvent(t, i/2, orderID, holdID)
					if ev.EventType == outbox.TypePaymentCaptured {
						paid++
					}
					events++
					last = publishEvent(t, js, ev, ev.EventID.String())
				}
				c, err := NewWebhooksFanOut(b.pool, js, Config{Logger: b.logger, Registerer: b.reg, BatchSize: n})
				require.NoError(t, err)
				msgs := fetchBatch(t, c, n)
				costs.Reset()

				c.handleBatch(db.WithRole(context.Background(), WebhooksFanOutName), msgs)
				waitFanOutSettled(t, js, last)

				cost := costOf(costs, WebhooksFanOutName)
				inbox := dbtest.Count(t, b.pool, "SELECT count(*) FROM inbox WHERE consumer = $1", WebhooksFanOutName)
				if !subscribed {
					// The read is a statement of its own, which the tracer
					// counts as a (read-only) transaction: no BEGIN, no
					// COMMIT, nothing written.
					require.Equal(t, db.Cost{Transactions: 1, Statements: 1, RoundTrips: 1}, cost)
					require.Zero(t, inbox, "no inbox rows")
					require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_messages"))
					return
				}
				// The read; BEGIN with the inbox insert, the store, COMMIT.
				require.Equal(t, db.Cost{Transactions: 2, WriteTransactions: 1, Statements: 3, RowsWritten: events, RoundTrips: 4}, cost)
				require.Equal(t, events, inbox, "inbox rows for the subscribed organizer's events only")
				require.Equal(t, events, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_messages WHERE organizer_id = $1", org))
				require.Equal(t, events, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_messages"))
				require.Equal(t, events+paid, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_deliveries"))
			})
		}
	}
}

// An endpoint created once an event was fanned out with nobody to tell
// gets the next event: nothing remembers that the organizer had no
// endpoint. And since the first event left no inbox row, a redelivery of
// it now stores its fact, once, as a first delivery would have.
func TestWebhooksFanOutSeesNewEndpoints(t *testing.T) {
	t.Parallel()
	b := setupFanOut(t)
	ns := natstest.New(t)
	_, js := ns.Connect(t)
	org := uuid.New()
	_, orderID, holdID := b.order(t, org)
	c, err := NewWebhooksFanOut(b.pool, js, Config{Logger: b.logger, Registerer: b.reg, BackoffBase: time.Millisecond, BackoffMax: 50 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	confirmed := sourceEvent(t, 0, orderID, holdID)
	waitFanOutSettled(t, js, publishEvent(t, js, confirmed, uuid.NewString()))
	require.Empty(t, b.messages(t, org))
	require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM inbox"))

	e := b.endpoint(t, org, "http://127.0.0.1:1/new", webhooks.EndpointParams{})
	paid := sourceEvent(t, 1, orderID, holdID)
	waitFanOutSettled(t, js, publishEvent(t, js, paid, uuid.NewString()))
	msgs := b.messages(t, org)
	require.Len(t, msgs, 1)
	require.Equal(t, webhooks.EventOrderPaid, msgs[0].EventType)
	require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1", e.ID))

	// The first event again (a republish), twice: one message.
	publishEvent(t, js, confirmed, uuid.NewString())
	waitFanOutSettled(t, js, publishEvent(t, js, confirmed, uuid.NewString()))
	require.Len(t, b.messages(t, org), 2)
	require.Equal(t, int64(2), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_deliveries WHERE endpoint_id = $1", e.ID))
}
