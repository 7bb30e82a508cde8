package handlers_test

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/catalog"
	"boxoffice/domain/cells"
	"boxoffice/domain/purchase"
	"boxoffice/handlers"
	"boxoffice/platform/admission"
	"boxoffice/platform/auth"
	"boxoffice/platform/db"
	"boxoffice/platform/orderfeed"
	"boxoffice/platform/outbox"
	"boxoffice/relay"
	"boxoffice/sqlcgen"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/natstest"
)

// pushedEvent is one event of a text/event-stream.
type pushedEvent struct{ id, event, data string }

// openStream opens an order's event stream on srv and returns its events
// as they arrive, and a function that closes it.
func openPushStream(t *testing.T, srv, tok, orderID, lastEventID string) (<-chan pushedEvent, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv+"/v1/orders/"+orderID+"/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode)
	events := make(chan pushedEvent, 16)
	go func() {
		defer close(events)
		defer res.Body.Close()
		sc := bufio.NewScanner(res.Body)
		var ev pushedEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.event != "" || ev.id != "" {
					events <- ev
				}
				ev = pushedEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				ev.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case strings.HasPrefix(line, ": resumed"):
				events <- pushedEvent{event: "resumed"}
			}
		}
	}()
	return events, cancel
}

func nextPushed(t *testing.T, events <-chan pushedEvent, within time.Duration) pushedEvent {
	t.Helper()
	select {
	case ev, ok := <-events:
		require.True(t, ok, "the stream ended")
		return ev
	case <-time.After(within):
		t.Fatalf("no event within %s", within)
		return pushedEvent{}
	}
}

// commitOrderEvent commits, as a worker does, the event typ about order
// with payload, after also, in one transaction.
func commitOrderEvent(t *testing.T, pool *pgxpool.Pool, typ string, order uuid.UUID, payload any, also func(context.Context, pgx.Tx) error) {
	t.Helper()
	require.NoError(t, db.WithTx(context.Background(), pool, func(ctx context.Context, tx pgx.Tx) error {
		if also != nil {
			if err := also(ctx, tx); err != nil {
				return err
			}
		}
		env, raw, err := outbox.NewOrderEvent(typ, order, time.Now(), "", "", payload)
		if err != nil {
			return err
		}
		return outbox.Insert(ctx, tx, env, raw)
	}))
}

// Order event streams are pushed: a change made through one API process
// reaches a stream opened on another through the cell's order feed, with
// no periodic read in between (the safety read is an hour); a client that
// reconnects with Last-Event-ID is sent only what it has not seen; and
// with NATS down the streams still report changes, by reading, and go
// back to push when it returns.
func TestOrderStreamsArePushed(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ns := natstest.New(t)
	logs := testkit.NewLog(t, testkit.Level(slog.LevelInfo))
	logger := logs.Logger
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)

	nc, js := ns.Connect(t)
	r, err := relay.New(pool, nc, relay.Config{Logger: logger})
	require.NoError(t, err)
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(ctx) }()
	t.Cleanup(func() { stop(); <-relayDone })

	signer := admission.NewSigner(admission.SignerConfig{Key: admissionKey})
	api := func(poll time.Duration) (string, *orderfeed.Feed) {
		_, fjs := ns.Connect(t)
		feed := orderfeed.New(orderfeed.Config{JetStream: fjs, Logger: logger, CheckInterval: 50 * time.Millisecond})
		done := make(chan error, 1)
		go func() { done <- feed.Run(ctx) }()
		t.Cleanup(func() { stop(); <-done })
		cat := catalog.New(pool)
		h := handlers.New(handlers.Config{
			Cells: cells.Single(&cells.Cell{
				Name: cells.Default, Catalog: cat, Purchase: purchase.NewService(pool, logger, purchase.Config{}),
				Room: fixedRoom(signer, cat, logger), Orders: feed,
			}),
			Logger: logger, Bearer: auth.NewVerifier(jwtSecret), Admission: signer,
			OrderStreamPoll: poll, OrderStreamSafetyRead: time.Hour, HoldsPerSecond: -1,
		})
		srv := httptest.NewServer(validating(t, h.Handler()))
		t.Cleanup(srv.Close)
		return srv.URL, feed
	}
	// A serves the buyers' writes. B's streams read only when woken (its
	// reads on a schedule are an hour apart); C's read every 100 ms while
	// its feed cannot follow the bus.
	urlA, _ := api(time.Hour)
	urlB, feedB := api(time.Hour)
	urlC, feedC := api(100 * time.Millisecond)
	_ = js
	for _, f := range []*orderfeed.Feed{feedB, feedC} {
		require.Eventually(t, f.Healthy, 10*time.Second, 10*time.Millisecond, "the feed follows the bus")
	}

	b := &testBundle{pool: pool, srv: &httptest.Server{URL: urlA}, logs: logs, signer: signer}
	ev := b.createEvent(t, b.organizer(t))
	order := func(seat string) (string, string) {
		_, tok := b.buyer(t)
		res := b.hold(t, tok, b.admit(t, tok, ev.ID), ev.ID, uuid.NewString(), seat)
		require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
		return tok, res.json(t)["orderId"].(string)
	}
	cancelOrder := func(tok, orderID string) {
		res := b.do(t, http.MethodPost, "/v1/orders/"+orderID+"/cancel", bearer(tok), nil)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	}

	t.Run("AChangeOnOneProcessReachesAStreamOnAnother", func(t *testing.T) {
		tok, orderID := order(ev.Seats[0])
		events, closeStream := openPushStream(t, urlB, tok, orderID, "")
		defer closeStream()
		first := nextPushed(t, events, 5*time.Second)
		require.Contains(t, first.data, `"status":"pending_payment"`)
		require.NotEmpty(t, first.id)
		start := time.Now()
		cancelOrder(tok, orderID)
		got := nextPushed(t, events, 10*time.Second)
		require.Contains(t, got.data, `"status":"canceled"`)
		t.Logf("canceled on A → stream on B in %s", time.Since(start))

		// Reconnecting with the last id received: nothing is sent again.
		again, closeAgain := openPushStream(t, urlB, tok, orderID, got.id)
		defer closeAgain()
		require.Equal(t, "resumed", nextPushed(t, again, 5*time.Second).event)
		// Reconnecting with an earlier id: the status missed is sent.
		missed, closeMissed := openPushStream(t, urlB, tok, orderID, first.id)
		defer closeMissed()
		require.Contains(t, nextPushed(t, missed, 5*time.Second).data, `"status":"canceled"`)
	})

	t.Run("APaymentIntentIsAnnouncedOnce", func(t *testing.T) {
		tok, orderID := order(ev.Seats[3])
		events, closeStream := openPushStream(t, urlB, tok, orderID, "")
		defer closeStream()
		require.Contains(t, nextPushed(t, events, 5*time.Second).data, `"status":"pending_payment"`)
		// What the payments worker commits once the provider made the
		// intent: the payment row and PaymentIntentCreated.
		oid := uuid.MustParse(orderID)
		commitOrderEvent(t, pool, outbox.TypePaymentIntentCreated, oid,
			outbox.PaymentIntentCreated{OrderID: oid, PaymentIntentID: "pi_push_test", Status: "requires_payment_method"},
			func(ctx context.Context, tx pgx.Tx) error {
				_, err := sqlcgen.New().PaymentUpsertIntent(ctx, tx, sqlcgen.PaymentUpsertIntentParams{
					OrderID: oid, Provider: "sandbox", PaymentIntentID: "pi_push_test", ClientSecret: "pi_push_test_secret_x",
					Status: "requires_payment_method", AmountMinor: 5000, Currency: "eur",
				})
				return err
			})
		got := nextPushed(t, events, 10*time.Second)
		require.Equal(t, "payment", got.event)
		require.JSONEq(t, `{"orderId":"`+orderID+`","paymentIntentId":"pi_push_test"}`, got.data)
		require.NotContains(t, got.data, "secret")
		cancelOrder(tok, orderID)
		require.Contains(t, nextPushed(t, events, 10*time.Second).data, `"status":"canceled"`, "the payment event is sent once")
	})

	t.Run("ATransitionWithoutAnEventOfItsOwnFollowsTheEventBeforeIt", func(t *testing.T) {
		// refunding → refunded is written by the saga on PaymentRefunded
		// and publishes nothing: the stream, woken by PaymentRefunded with
		// a follow-up, keeps reading for a while and sees it.
		tok, orderID := order(ev.Seats[4])
		events, closeStream := openPushStream(t, urlB, tok, orderID, "")
		defer closeStream()
		require.Contains(t, nextPushed(t, events, 5*time.Second).data, `"status":"pending_payment"`)
		oid := uuid.MustParse(orderID)
		commitOrderEvent(t, pool, outbox.TypePaymentRefunded, oid, outbox.PaymentRefunded{OrderID: oid, PaymentIntentID: "pi_push_test_refund",
			AmountRefunded: dbtest.Count(t, pool, "SELECT amount_minor FROM orders WHERE id = $1", oid)}, nil)
		// Once the relay has published the event the stream is woken and
		// reads; the consumer's transition comes a moment later, with no
		// event of its own. (Were it to come before that read, the read
		// would see it: the test would pass without the settle reads, but
		// not fail wrongly. With them switched off it fails, checked.)
		require.Eventually(t, func() bool {
			return dbtest.Count(t, pool, "SELECT count(*) FROM outbox WHERE aggregate_id = $1", oid) == 0
		}, 10*time.Second, 10*time.Millisecond, "the relay publishes the event")
		time.Sleep(200 * time.Millisecond)
		_, err := pool.Exec(context.Background(), "UPDATE orders SET status = 'failed', updated_at = now() WHERE id = $1", oid)
		require.NoError(t, err)
		require.Contains(t, nextPushed(t, events, 5*time.Second).data, `"status":"failed"`)
	})

	t.Run("WithNATSDownStreamsReadAndRecover", func(t *testing.T) {
		tok, orderID := order(ev.Seats[1])
		events, closeStream := openPushStream(t, urlC, tok, orderID, "")
		defer closeStream()
		require.Contains(t, nextPushed(t, events, 5*time.Second).data, `"status":"pending_payment"`)

		ns.Stop()
		require.Eventually(t, func() bool { return !feedC.Healthy() }, 10*time.Second, 10*time.Millisecond, "the feed says it cannot follow the bus")
		cancelOrder(tok, orderID) // committed; the relay cannot publish it
		require.Contains(t, nextPushed(t, events, 10*time.Second).data, `"status":"canceled"`, "a stream reads while the feed is down")

		ns.Start(t)
		require.Eventually(t, feedB.Healthy, 20*time.Second, 10*time.Millisecond, "the feed follows the bus again")
		require.Eventually(t, feedC.Healthy, 20*time.Second, 10*time.Millisecond, "the feed follows the bus again")
		tok2, orderID2 := order(ev.Seats[2])
		pushed, closePushed := openPushStream(t, urlB, tok2, orderID2, "")
		defer closePushed()
		require.Contains(t, nextPushed(t, pushed, 5*time.Second).data, `"status":"pending_payment"`)
		cancelOrder(tok2, orderID2)
		require.Contains(t, nextPushed(t, pushed, 10*time.Second).data, `"status":"canceled"`, "pushed again once NATS is back")
	})
}

// An order event stream reads its order once, when it opens, not for the
// commands and provider facts of a purchase that change nothing it shows
// (six such events, which the bus does not even send the API process's
// feed), nor for the cancellation that follows: OrderCanceled says
// canceled.
func TestOrderStreamReadsOnlyOnChanges(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ns := natstest.New(t)
	logger := testkit.NewLog(t, testkit.Level(slog.LevelInfo)).Logger
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	nc, fjs := ns.Connect(t)
	r, err := relay.New(pool, nc, relay.Config{Logger: logger})
	require.NoError(t, err)
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(ctx) }()
	feed := orderfeed.New(orderfeed.Config{JetStream: fjs, Logger: logger, CheckInterval: 50 * time.Millisecond})
	feedDone := make(chan error, 1)
	go func() { feedDone <- feed.Run(ctx) }()
	t.Cleanup(func() { stop(); <-relayDone; <-feedDone })
	require.Eventually(t, feed.Healthy, 10*time.Second, 10*time.Millisecond, "the feed follows the bus")

	traced, reads := tracedPool(t, pool, "OrderStatusGetForUser")
	b := setupPool(t, pool, func(c *handlers.Config) {
		cellOf(c).Purchase = purchase.NewService(traced, logger, purchase.Config{})
		cellOf(c).Orders, c.OrderStreamSafetyRead = feed, time.Hour
	})
	ev := b.createEvent(t, b.organizer(t))
	_, tok := b.buyer(t)
	res := b.hold(t, tok, b.admit(t, tok, ev.ID), ev.ID, uuid.NewString(), ev.Seats[0])
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	orderID := res.json(t)["orderId"].(string)
	oid := uuid.MustParse(orderID)

	events, closeStream := openPushStream(t, b.srv.URL, tok, orderID, "")
	defer closeStream()
	require.Contains(t, nextPushed(t, events, 5*time.Second).data, `"status":"pending_payment"`)
	require.EqualValues(t, 1, reads.n.Load(), "one read to answer 404 or start, once watching")

	n := feed.Handled()
	for _, typ := range []string{
		outbox.TypeHoldCreated, outbox.TypePaymentAuthorizationRequested, outbox.TypePaymentAuthorized,
		outbox.TypeCaptureRequested, outbox.TypePaymentCaptured, outbox.TypeAuthorizationCanceled,
	} {
		commitOrderEvent(t, pool, typ, oid, map[string]any{"order_id": oid}, nil)
	}
	cancel := b.do(t, http.MethodPost, "/v1/orders/"+orderID+"/cancel", bearer(tok), nil)
	require.Equal(t, http.StatusOK, cancel.status, "%s", cancel.body)
	require.Contains(t, nextPushed(t, events, 10*time.Second).data, `"status":"canceled"`)
	_, open := <-events
	require.False(t, open, "the stream ends at a final status")
	require.EqualValues(t, 1, reads.n.Load(), "the six events cost no read, nor does OrderCanceled: it says canceled")
	// The six come before OrderCanceled in the stream, and the ordered
	// consumer delivers in stream order: had the bus sent them, the feed
	// would have handled them by the time the stream said canceled. What
	// it handled since is OrderCanceled and, at most, the event the
	// cancel wrote after it.
	require.LessOrEqual(t, feed.Handled()-n, uint64(2), "the bus sent the feed none of the six")
}
