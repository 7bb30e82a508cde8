package handlers_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/handlers"
	"boxoffice/platform/db"
	"boxoffice/platform/orderfeed"
	"boxoffice/platform/outbox"
	"boxoffice/relay"
	"boxoffice/sqlcgen"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/natstest"
)

// streamRole is the role the order event stream's database work is
// counted under (handlers label each operation's work "api <operation>").
const streamRole = "api stream-order-events"

// streamReads is a pool tracer that counts each role's database work
// (db.CostTracer) and runs a test's hook at a stream's read of an order:
// just before the read is sent, or once it returned.
type streamReads struct {
	*db.CostTracer

	mu            sync.Mutex
	before, after map[uuid.UUID]func()
}

// beforeRead runs f, once, when a stream is about to read order.
func (r *streamReads) beforeRead(order uuid.UUID, f func()) { r.set(r.before, order, f) }

// afterRead runs f, once, when a stream's read of order returned, before
// the stream goes on.
func (r *streamReads) afterRead(order uuid.UUID, f func()) { r.set(r.after, order, f) }

func (r *streamReads) set(m map[uuid.UUID]func(), order uuid.UUID, f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m[order] = f
}

// take removes and returns the hook of m for the stream read data is, if
// any.
func (r *streamReads) take(ctx context.Context, m map[uuid.UUID]func(), sql string, args []any) func() {
	if db.Role(ctx) != streamRole || !strings.Contains(sql, "-- name: OrderStatusGetForUser ") || len(args) == 0 {
		return nil
	}
	order, ok := args[0].(uuid.UUID)
	if !ok {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	f := m[order]
	delete(m, order)
	return f
}

type readKey struct{}

func (r *streamReads) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if f := r.take(ctx, r.before, data.SQL, data.Args); f != nil {
		f()
	}
	ctx = context.WithValue(ctx, readKey{}, data)
	return r.CostTracer.TraceQueryStart(ctx, conn, data)
}

func (r *streamReads) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	r.CostTracer.TraceQueryEnd(ctx, conn, data)
	if start, ok := ctx.Value(readKey{}).(pgx.TraceQueryStartData); ok && data.Err == nil {
		if f := r.take(ctx, r.after, start.SQL, start.Args); f != nil {
			f()
		}
	}
}

// roundTrips is what role has sent to the server and waited on so far.
func (r *streamReads) roundTrips(role string) int64 {
	for _, c := range r.Costs() {
		if c.Role == role {
			return c.RoundTrips
		}
	}
	return 0
}

// streamBundle is an API whose order streams follow the cell's order feed
// (the relay publishing the outbox) and read through a pool that
// streamReads traces; the test writes through pool, untraced.
type streamBundle struct {
	*testBundle
	pool  *pgxpool.Pool
	feed  *orderfeed.Feed
	reads *streamReads
	event event
}

func setupStreams(t *testing.T) *streamBundle {
	t.Helper()
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

	reads := &streamReads{CostTracer: db.NewCostTracer(), before: map[uuid.UUID]func(){}, after: map[uuid.UUID]func(){}}
	traced, err := db.NewPool(ctx, db.PoolConfig{URL: pool.Config().ConnString(), Tracer: reads})
	require.NoError(t, err)
	t.Cleanup(traced.Close)
	b := setupPool(t, pool, func(c *handlers.Config) {
		cellOf(c).Purchase = purchase.NewService(traced, logger, purchase.Config{})
		// Streams read on a schedule only once an hour: every read a test
		// sees is one the stream chose to make.
		cellOf(c).Orders, c.OrderStreamSafetyRead = feed, time.Hour
	})
	t.Cleanup(func() {
		require.Eventually(t, func() bool { return feed.Watching() == 0 }, 10*time.Second, 10*time.Millisecond,
			"every watch ends with its stream")
	})
	return &streamBundle{testBundle: b, pool: pool, feed: feed, reads: reads, event: b.createEvent(t, b.organizer(t))}
}

// order holds seat for a new buyer: the buyer's token and the order.
func (b *streamBundle) order(t *testing.T, seat int) (string, uuid.UUID) {
	t.Helper()
	_, tok := b.buyer(t)
	res := b.hold(t, tok, b.admit(t, tok, b.event.ID), b.event.ID, uuid.NewString(), b.event.Seats[seat])
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	return tok, uuid.MustParse(res.json(t)["orderId"].(string))
}

// commit commits, as the worker that writes it does, the event typ of
// order with payload, moving the order to status in the same transaction
// unless status is "", and waits until the feed has it when the feed
// follows events of typ (the bus sends it no others).
func (b *streamBundle) commit(t *testing.T, order uuid.UUID, status purchase.OrderStatus, typ string, payload any) {
	t.Helper()
	n := b.feed.Handled()
	commitOrderEvent(t, b.pool, typ, order, payload, func(ctx context.Context, tx pgx.Tx) error {
		if status == "" {
			return nil
		}
		_, err := tx.Exec(ctx, "UPDATE orders SET status = $2, version = version + 1, updated_at = now() WHERE id = $1", order, string(status))
		return err
	})
	if orderfeed.Follows(typ) {
		require.Eventually(t, func() bool { return b.feed.Handled() > n }, 10*time.Second, 5*time.Millisecond, "the feed has %s", typ)
	}
}

// createIntent commits what the payments worker does once the provider
// made the order's PaymentIntent: the payment row and
// PaymentIntentCreated.
func (b *streamBundle) createIntent(t *testing.T, order uuid.UUID, intent string) {
	t.Helper()
	n := b.feed.Handled()
	commitOrderEvent(t, b.pool, outbox.TypePaymentIntentCreated, order,
		outbox.PaymentIntentCreated{OrderID: order, PaymentIntentID: intent, Status: "requires_payment_method"},
		func(ctx context.Context, tx pgx.Tx) error {
			_, err := sqlcgen.New().PaymentUpsertIntent(ctx, tx, sqlcgen.PaymentUpsertIntentParams{
				OrderID: order, Provider: "sandbox", PaymentIntentID: intent, ClientSecret: intent + "_secret_x",
				Status: "requires_payment_method", AmountMinor: 5000, Currency: "eur",
			})
			return err
		})
	require.Eventually(t, func() bool { return b.feed.Handled() > n }, 10*time.Second, 5*time.Millisecond, "the feed has the intent")
}

// statuses reads the stream's events until it ends: the status of each
// status event, and "payment:<intent>" for the payment event.
func statuses(t *testing.T, events <-chan pushedEvent, within time.Duration) []string {
	t.Helper()
	var got []string
	deadline := time.After(within)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return got
			}
			switch ev.event {
			case "status":
				_, rest, _ := strings.Cut(ev.data, `"status":"`)
				status, _, _ := strings.Cut(rest, `"`)
				got = append(got, status)
			case "payment":
				require.NotContains(t, ev.data, "secret")
				_, rest, _ := strings.Cut(ev.data, `"paymentIntentId":"`)
				intent, _, _ := strings.Cut(rest, `"`)
				got = append(got, "payment:"+intent)
			}
		case <-deadline:
			t.Fatalf("the stream did not end within %s; it sent %v", within, got)
			return got
		}
	}
}

// A buyer's stream of a whole purchase reads its order once, when it
// opens (the ownership check included), and never for a change: each of
// the purchase's nine events, committed as the worker that writes it
// does, reaches the stream with what it changed, and the stream writes
// its SSE event from that. One round trip in all.
func TestOrderStreamRoundTrips(t *testing.T) {
	t.Parallel()
	b := setupStreams(t)
	tok, order := b.order(t, 0) // HoldCreated, PaymentAuthorizationRequested
	events, closeStream := openPushStream(t, b.srv.URL, tok, order.String(), "")
	defer closeStream()
	require.Contains(t, nextPushed(t, events, 5*time.Second).data, `"status":"pending_payment"`)
	require.EqualValues(t, 1, b.reads.roundTrips(streamRole), "one read opens the stream")

	b.createIntent(t, order, "pi_round_trips")
	b.commit(t, order, "", outbox.TypePaymentAuthorized, outbox.PaymentAuthorized{OrderID: order, PaymentIntentID: "pi_round_trips"})
	b.commit(t, order, purchase.OrderCapturePending, outbox.TypeOrderConfirmed, outbox.OrderConfirmed{OrderID: order})
	b.commit(t, order, "", outbox.TypeCaptureRequested, outbox.CaptureRequested{OrderID: order, PaymentIntentID: "pi_round_trips"})
	b.commit(t, order, "", outbox.TypePaymentCaptured, outbox.PaymentCaptured{OrderID: order, PaymentIntentID: "pi_round_trips"})
	b.commit(t, order, purchase.OrderPaid, outbox.TypeTicketIssueRequested, outbox.TicketIssueRequested{OrderID: order})
	b.commit(t, order, purchase.OrderTicketed, outbox.TypeTicketIssued, outbox.TicketIssued{OrderID: order})

	require.Equal(t, []string{"payment:pi_round_trips", "capture_pending", "paid", "ticketed"}, statuses(t, events, 10*time.Second),
		"every change, in order, and the stream ends at ticketed")
	require.EqualValues(t, 1, b.reads.roundTrips(streamRole), "no read for any change")
}

// The race between a stream's opening read and the order's events: the
// stream watches the order before it reads it, so an event committed
// after the read is never lost, and an event delivered before or during
// the read that the read already has is never shown again, nor after a
// newer status.
func TestOrderStreamOpenRacesEvents(t *testing.T) {
	t.Parallel()
	b := setupStreams(t)

	t.Run("EventsTheReadHasAreNotShownAgain", func(t *testing.T) {
		t.Parallel()
		tok, order := b.order(t, 1)
		// While the stream is about to read, the order moves on twice and
		// the feed delivers both events to its watch: the read has them.
		b.reads.beforeRead(order, func() {
			b.createIntent(t, order, "pi_race_before")
			b.commit(t, order, purchase.OrderCapturePending, outbox.TypeOrderConfirmed, outbox.OrderConfirmed{OrderID: order})
			b.commit(t, order, purchase.OrderPaid, outbox.TypeTicketIssueRequested, outbox.TicketIssueRequested{OrderID: order})
		})
		events, closeStream := openPushStream(t, b.srv.URL, tok, order.String(), "")
		defer closeStream()
		require.Contains(t, nextPushed(t, events, 10*time.Second).data, `"status":"paid"`, "the read's status first")
		b.commit(t, order, purchase.OrderTicketed, outbox.TypeTicketIssued, outbox.TicketIssued{OrderID: order})
		require.Equal(t, []string{"ticketed"}, statuses(t, events, 10*time.Second),
			"neither capture_pending nor paid again, no payment event past payment")
	})

	t.Run("AnEventAfterTheReadIsNotLost", func(t *testing.T) {
		t.Parallel()
		tok, order := b.order(t, 2)
		// Once the stream has read pending_payment and before it shows it,
		// the intent is created and the buyer cancels; the feed delivers
		// both before the stream goes on.
		b.reads.afterRead(order, func() {
			b.createIntent(t, order, "pi_race_after")
			b.commit(t, order, purchase.OrderCanceled, outbox.TypeOrderCanceled, outbox.OrderCanceled{OrderID: order})
		})
		events, closeStream := openPushStream(t, b.srv.URL, tok, order.String(), "")
		defer closeStream()
		require.Equal(t, []string{"pending_payment", "payment:pi_race_after", "canceled"}, statuses(t, events, 10*time.Second))
	})

	t.Run("AReconnectionIsResumedWhicheverClockNamedTheStatus", func(t *testing.T) {
		t.Parallel()
		// A status shown from an event is named by the event's time (its
		// writer's clock), the same status read by the order row's (the
		// database's): a client that reconnects with the id it got is
		// not sent that status again.
		tok, order := b.order(t, 3)
		first, closeFirst := openPushStream(t, b.srv.URL, tok, order.String(), "")
		require.Contains(t, nextPushed(t, first, 5*time.Second).data, `"status":"pending_payment"`)
		b.commit(t, order, purchase.OrderCapturePending, outbox.TypeOrderConfirmed, outbox.OrderConfirmed{OrderID: order})
		confirmed := nextPushed(t, first, 10*time.Second)
		require.Contains(t, confirmed.data, `"status":"capture_pending"`)
		closeFirst()
		again, closeAgain := openPushStream(t, b.srv.URL, tok, order.String(), confirmed.id)
		defer closeAgain()
		require.Equal(t, "resumed", nextPushed(t, again, 5*time.Second).event)
		b.commit(t, order, purchase.OrderPaid, outbox.TypeTicketIssueRequested, outbox.TicketIssueRequested{OrderID: order})
		b.commit(t, order, purchase.OrderTicketed, outbox.TypeTicketIssued, outbox.TicketIssued{OrderID: order})
		require.Equal(t, []string{"paid", "ticketed"}, statuses(t, again, 10*time.Second))
	})
}
