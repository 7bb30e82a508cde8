package webhookreceiver_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pb33f/libopenapi"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/webhooks"
	"boxoffice/examples/webhookreceiver"
	"boxoffice/platform/outbox"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// delivery is one request the receiver was sent, and its answer.
type delivery struct {
	header http.Header
	body   []byte
	status int
}

// recorder passes requests to the receiver and keeps each with its answer.
type recorder struct {
	mu   sync.Mutex
	next http.Handler
	got  []delivery
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(body))
	rec := httptest.NewRecorder()
	r.mu.Lock()
	next := r.next
	r.mu.Unlock()
	next.ServeHTTP(rec, req)
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
	r.mu.Lock()
	r.got = append(r.got, delivery{header: req.Header.Clone(), body: body, status: rec.Code})
	r.mu.Unlock()
}

func (r *recorder) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// The example receiver of docs/webhooks.md, sent every message type
// (webhooks.MessageTypes) by Boxoffice's own fan-out and dispatcher:
// order facts through the fan-out's handler, webhook.test through the
// test-delivery call, and both notices by real failures of two other
// endpoints of the organizer. It accepts each (and each body matches the
// webhooks section of openapi.yaml for its type), keeps the order's newest
// fact whatever the arrival order, refuses a tampered body and an old
// timestamp, and makes a replay of a message (same webhook-id) a no-op.
func TestReceiverTakesEveryMessageTheDispatcherSends(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	_, err := pool.Exec(ctx, webhookreceiver.Schema)
	require.NoError(t, err)
	logs := testkit.NewLog(t)
	keys := testKeyring(t)
	svc := webhooks.NewService(pool, webhooks.ServiceConfig{Guard: &webhooks.Guard{AllowPrivate: true}, Keys: keys, Logger: logs.Logger})
	org := uuid.New()

	rec := &recorder{next: http.NotFoundHandler()}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	all := append(append([]string{}, webhooks.EventTypes...), webhooks.NoticeTypes...)
	ep, err := svc.Create(ctx, org, webhooks.EndpointParams{URL: srv.URL, EventTypes: all})
	require.NoError(t, err)
	rc, err := webhookreceiver.New(ep.Secret, pool, logs.Logger)
	require.NoError(t, err)
	rec.mu.Lock()
	rec.next = rc
	rec.mu.Unlock()

	// Three more endpoints of the organizer, failing so that the
	// dispatcher sends the notices: one answers 410 (disabled at once),
	// one 500 until its delivery is exhausted, one 400 (its delivery
	// needs review).
	answer := func(code int) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }))
		t.Cleanup(s.Close)
		return s.URL
	}
	_, err = svc.Create(ctx, org, webhooks.EndpointParams{URL: answer(http.StatusGone), EventTypes: []string{webhooks.EventOrderPaid}})
	require.NoError(t, err)
	_, err = svc.Create(ctx, org, webhooks.EndpointParams{URL: answer(http.StatusInternalServerError), EventTypes: []string{webhooks.EventOrderConfirmed}})
	require.NoError(t, err)
	_, err = svc.Create(ctx, org, webhooks.EndpointParams{URL: answer(http.StatusBadRequest), EventTypes: []string{webhooks.EventTicketIssued}})
	require.NoError(t, err)

	// One order's life, as the saga's events, through the fan-out; each
	// fact a second after the one before, the full refund the newest.
	ev := fixture.NewEvent(t, pool, fixture.EventSpec{OrganizerID: org, Name: "show", StartsAt: time.Now().Add(time.Hour), SeatsPerRow: 4, PriceMinor: 2500})
	h := fixture.Hold(t, pool, ev.ID, "journey-1", ev.SeatsByID()[:2]...)
	order := h.OrderID
	fanOut := webhooks.FanOutHandler(logs.Logger)
	at := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	publish := func(typ string, payload any) {
		t.Helper()
		at = at.Add(time.Second)
		env, _, err := outbox.NewOrderEvent(typ, order, at, "journey-1", "", payload)
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return fanOut(ctx, tx, env) }))
	}
	publish(outbox.TypeOrderConfirmed, outbox.OrderConfirmed{OrderID: order, HoldID: h.HoldID})
	publish(outbox.TypePaymentCaptured, outbox.PaymentCaptured{OrderID: order, AmountReceived: 5000})
	publish(outbox.TypeTicketIssued, outbox.TicketIssued{OrderID: order, TicketIDs: []uuid.UUID{uuid.New(), uuid.New()}})
	publish(outbox.TypeHoldExpired, outbox.HoldExpired{OrderID: order, HoldID: h.HoldID, SeatIDs: ev.SeatsByID()[:2]})
	publish(outbox.TypeOrderCanceled, outbox.OrderCanceled{OrderID: order, Reason: "requested_by_customer"})
	publish(outbox.TypePaymentRefunded, outbox.PaymentRefunded{OrderID: order, AmountRefunded: 2500})
	dbtest.Exec(t, pool, "UPDATE orders SET status = 'refunded' WHERE id = $1", order)
	publish(outbox.TypePaymentRefunded, outbox.PaymentRefunded{OrderID: order, AmountRefunded: 5000})
	// Seats that came back, offered to a buyer on the event's waitlist
	// (stored by the offer's own transaction, not by the fan-out).
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		return webhooks.StoreWaitlistOffered(ctx, tx, org, "journey-1", at.Add(time.Second), webhooks.WaitlistOfferedData{
			EntryID: uuid.New(), EventID: ev.ID, CategoryID: uuid.New(), SeatIDs: ev.SeatsByID()[:2], ExpiresAt: at.Add(11 * time.Minute),
		})
	}))
	_, err = svc.SendTest(ctx, org, ep.ID)
	require.NoError(t, err)

	runDispatcher(t, pool, keys, logs)
	received := func() map[string]int64 {
		rows, err := pool.Query(ctx, "SELECT type, count(*) FROM received_webhooks GROUP BY type")
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var typ string
			var n int64
			require.NoError(t, rows.Scan(&typ, &n))
			out[typ] = n
		}
		require.NoError(t, rows.Err())
		return out
	}
	waitFor(t, 30*time.Second, "a message of every type", func() bool { return len(received()) == len(webhooks.MessageTypes) })
	for _, mt := range webhooks.MessageTypes {
		require.Equal(t, int64(1), received()[mt.Name], "one %s", mt.Name)
	}

	// Every body is what the contract says for its type.
	contract := webhookSchemas(t)
	var paid delivery
	for _, d := range rec.deliveries() {
		require.Equal(t, http.StatusNoContent, d.status, "%s", d.body)
		var m struct {
			Type string `json:"type"`
		}
		require.NoError(t, json.Unmarshal(d.body, &m))
		ok, errs := schema_validation.NewSchemaValidator().ValidateSchemaBytes(contract(t, m.Type), d.body)
		require.True(t, ok, "%s does not match openapi.yaml: %v", d.body, errs)
		if m.Type == webhooks.EventOrderPaid {
			paid = d
		}
	}
	var status string
	require.NoError(t, pool.QueryRow(ctx, "SELECT status FROM order_status WHERE order_id = $1", order).Scan(&status))
	require.Equal(t, "refunded", status, "the newest fact wins whatever order the messages arrived in")

	post := func(header http.Header, body []byte) int {
		req, err := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header = header
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		return res.StatusCode
	}
	before := received()

	// A body changed in flight does not verify.
	tampered := bytes.Replace(paid.body, []byte(`"amount_received":5000`), []byte(`"amount_received":1`), 1)
	require.NotEqual(t, paid.body, tampered)
	require.Equal(t, http.StatusUnauthorized, post(paid.header.Clone(), tampered))

	// A validly signed message whose timestamp is 10 minutes old is a
	// replayed capture: refused.
	key, err := webhooks.ParseSecret(ep.Secret)
	require.NoError(t, err)
	old := time.Now().Add(-10 * time.Minute)
	stale := paid.header.Clone()
	stale.Set(webhooks.HeaderTimestamp, strconv.FormatInt(old.Unix(), 10))
	stale.Set(webhooks.HeaderSignature, webhooks.Sign([]webhooks.Key{key}, paid.header.Get(webhooks.HeaderID), old, paid.body))
	require.Equal(t, http.StatusUnauthorized, post(stale, paid.body))

	// An older fact arriving late changes nothing: order.paid again under
	// a new webhook-id (as a retry that overtook nothing would) is
	// recorded but does not move the order back.
	late := paid.header.Clone()
	lateID := webhooks.MessageID(uuid.New())
	now := time.Now()
	late.Set(webhooks.HeaderID, lateID)
	late.Set(webhooks.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	late.Set(webhooks.HeaderSignature, webhooks.Sign([]webhooks.Key{key}, lateID, now, paid.body))
	require.Equal(t, http.StatusNoContent, post(late, paid.body))
	require.NoError(t, pool.QueryRow(ctx, "SELECT status FROM order_status WHERE order_id = $1", order).Scan(&status))
	require.Equal(t, "refunded", status)

	// The organizer replays order.paid: the dispatcher sends the same
	// webhook-id again, freshly signed, and the receiver acknowledges it
	// without applying it twice.
	msgID, err := webhooks.ParseMessageID(paid.header.Get(webhooks.HeaderID))
	require.NoError(t, err)
	n := len(rec.deliveries())
	_, err = svc.Replay(ctx, org, msgID, webhooks.ReplayParams{EndpointID: &ep.ID})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the replay", func() bool { return len(rec.deliveries()) > n })
	replay := rec.deliveries()[n]
	require.Equal(t, paid.header.Get(webhooks.HeaderID), replay.header.Get(webhooks.HeaderID))
	require.Equal(t, paid.body, replay.body)
	require.Equal(t, http.StatusNoContent, replay.status)
	after := received()
	before[webhooks.EventOrderPaid]++ // the late one above, under its own id
	require.Equal(t, before, after, "the replay is recorded once, as the original")
}

// testKeyring is a keyring of one fresh AES-256 key.
func testKeyring(t *testing.T) *webhooks.Keyring {
	t.Helper()
	raw := make([]byte, 32)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	k, err := webhooks.ParseKeyring("test:" + base64.StdEncoding.EncodeToString(raw))
	require.NoError(t, err)
	return k
}

// runDispatcher runs a fast dispatcher until the test ends: two attempts
// per delivery, so that a failing endpoint's delivery is exhausted soon.
func runDispatcher(t *testing.T, pool *pgxpool.Pool, keys *webhooks.Keyring, logs *testkit.Log) {
	t.Helper()
	d, err := webhooks.NewDispatcher(pool, webhooks.DispatcherConfig{
		Guard: &webhooks.Guard{AllowPrivate: true}, Keys: keys,
		RetrySchedule: []time.Duration{0, 20 * time.Millisecond},
		Timeout:       2 * time.Second, Lease: 4 * time.Second, PollInterval: 10 * time.Millisecond,
		BusyDelay: 50 * time.Millisecond, FlushInterval: 5 * time.Millisecond, Logger: logs.Logger,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// webhookSchemas returns the lookup of a message type's body schema in the
// webhooks section of openapi.yaml.
func webhookSchemas(t *testing.T) func(t *testing.T, typ string) *base.Schema {
	t.Helper()
	raw, err := os.ReadFile("../../openapi.yaml")
	require.NoError(t, err)
	doc, err := libopenapi.NewDocument(raw)
	require.NoError(t, err)
	model, err := doc.BuildV3Model()
	require.NoError(t, err)
	return func(t *testing.T, typ string) *base.Schema {
		t.Helper()
		item, ok := model.Model.Webhooks.Get(typ)
		require.True(t, ok, "openapi.yaml has no webhook %s", typ)
		mt, ok := item.Post.RequestBody.Content.Get("application/json")
		require.True(t, ok)
		return mt.Schema.Schema()
	}
}

// waitFor polls cond until it holds, failing after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNow(t, "timed out waiting for "+what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
