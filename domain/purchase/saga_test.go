package purchase_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/platform/db"
	"boxoffice/platform/outbox"
	"boxoffice/sqlcgen"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

// secretMarker is the client secret every test payment row carries; it
// must never show up in a log line or an event.
const secretMarker = "pi_x_secret_TOPSECRET"

// sagaConsumer is the inbox name the tests record applied events under,
// as the purchase_saga consumer does.
const sagaConsumer = "purchase_saga"

// sagaBundle is what a saga test works with: its own database with one
// event, a hold service, the saga and the expirer logging into logs.
type sagaBundle struct {
	pool     *pgxpool.Pool
	svc      *purchase.Service
	saga     *purchase.Saga
	expirer  *purchase.Expirer
	logs     *testkit.Log
	seats    []uuid.UUID
	eventID  uuid.UUID
	nextSeat atomic.Int64
}

func newSagaBundle(t *testing.T, rows, seatsPerRow int) *sagaBundle {
	t.Helper()
	pool := dbtest.New(t)
	ev := fixture.NewEvent(t, pool, fixture.EventSpec{Name: "saga", Currency: "usd", Rows: rows, SeatsPerRow: seatsPerRow, PriceMinor: 2500})
	seats := ev.Seats
	logs := testkit.NewLog(t)
	return &sagaBundle{
		pool:    pool,
		svc:     purchase.NewService(pool, logs.Logger, purchase.Config{HoldTTL: 10 * time.Minute}),
		saga:    purchase.NewSaga(purchase.SagaConfig{Logger: logs.Logger}),
		expirer: purchase.NewExpirer(pool, purchase.ExpirerConfig{Logger: logs.Logger}),
		logs:    logs,
		seats:   seats,
		eventID: ev.ID,
	}
}

// hold holds seats (fresh ones when none are given) for a new buyer.
func (b *sagaBundle) hold(t *testing.T, seats ...uuid.UUID) purchase.Hold {
	t.Helper()
	h, err := b.tryHold(seats...)
	require.NoError(t, err)
	return h
}

// tryHold is hold for goroutines other than the test's.
func (b *sagaBundle) tryHold(seats ...uuid.UUID) (purchase.Hold, error) {
	if len(seats) == 0 {
		seats = []uuid.UUID{b.seats[b.nextSeat.Add(1)-1]}
	}
	return b.svc.Hold(context.Background(), purchase.HoldParams{
		UserID: uuid.New(), EventID: b.eventID, SeatIDs: seats,
		IdempotencyKey: uuid.NewString(), CorrelationID: "corr-" + uuid.NewString(),
	})
}

// pay writes the payments row the payments worker would, with a client
// secret, and returns the intent id.
func (b *sagaBundle) pay(t *testing.T, orderID uuid.UUID) string {
	t.Helper()
	intent := "pi_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	dbtest.Exec(t, b.pool, `INSERT INTO payments (order_id, provider, payment_intent_id, client_secret, status, amount_minor, currency)
		SELECT id, 'sandbox', $2, $3, 'requires_payment_method', amount_minor, currency FROM orders WHERE id = $1`,
		orderID, intent, secretMarker)
	return intent
}

// event builds an event about the order in its correlation, caused by a
// provider event, as the webhook ingress does.
func (b *sagaBundle) event(t *testing.T, typ string, orderID uuid.UUID, payload any) outbox.Envelope {
	t.Helper()
	var corr string
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT correlation_id FROM orders WHERE id = $1", orderID).Scan(&corr))
	env, _, err := outbox.NewOrderEvent(typ, orderID, time.Now(), corr, "stripe:evt_"+uuid.NewString(), payload)
	require.NoError(t, err)
	return env
}

func (b *sagaBundle) authorized(t *testing.T, orderID uuid.UUID, intent string) outbox.Envelope {
	t.Helper()
	return b.event(t, outbox.TypePaymentAuthorized, orderID, outbox.PaymentAuthorized{
		OrderID: orderID, PaymentIntentID: intent, AmountCapturable: 2500, ProviderEventID: "evt_1"})
}

func (b *sagaBundle) captured(t *testing.T, orderID uuid.UUID, intent string) outbox.Envelope {
	t.Helper()
	return b.event(t, outbox.TypePaymentCaptured, orderID, outbox.PaymentCaptured{
		OrderID: orderID, PaymentIntentID: intent, AmountReceived: 2500, ProviderEventID: "evt_2"})
}

// stepFunc is one saga step.
type stepFunc func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error

// apply runs step in a transaction that first records the inbox row, as
// the consumer runtime does: an event applied before is skipped.
func (b *sagaBundle) apply(t *testing.T, step stepFunc, ev outbox.Envelope) error {
	t.Helper()
	return db.WithTx(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
		fresh, err := sqlcgen.New().InboxInsertMany(ctx, tx, sqlcgen.InboxInsertManyParams{Consumer: sagaConsumer, EventIds: []uuid.UUID{ev.EventID}})
		if err != nil || len(fresh) == 0 {
			return err
		}
		return step(ctx, tx, ev)
	})
}

// run runs step in a transaction without the inbox.
func (b *sagaBundle) run(step stepFunc, ev outbox.Envelope) error {
	return db.WithTx(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
		return step(ctx, tx, ev)
	})
}

// events returns the envelopes of typ written for the order.
func (b *sagaBundle) events(t *testing.T, orderID uuid.UUID, typ string) []outbox.Envelope {
	t.Helper()
	return slices.DeleteFunc(fixture.OutboxEnvelopes(t, b.pool, typ), func(e outbox.Envelope) bool { return e.AggregateID != orderID })
}

func (b *sagaBundle) count(t *testing.T, orderID uuid.UUID, typ string) int {
	t.Helper()
	return len(b.events(t, orderID, typ))
}

// state is an order's status, version, its hold's status and how many of
// the hold's seats are still owned.
type state struct {
	order, hold string
	version     int
	owned       int
}

func (b *sagaBundle) state(t *testing.T, orderID uuid.UUID) state {
	t.Helper()
	var s state
	require.NoError(t, b.pool.QueryRow(context.Background(), `
		SELECT o.status, o.version, h.status,
		       (SELECT count(*) FROM hold_seats hs WHERE hs.hold_id = h.id AND hs.released_at IS NULL)
		FROM orders o JOIN holds h ON h.order_id = o.id WHERE o.id = $1`, orderID).
		Scan(&s.order, &s.version, &s.hold, &s.owned))
	return s
}

// owner is the buyer of the order.
func (b *sagaBundle) owner(t *testing.T, orderID uuid.UUID) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT user_id FROM orders WHERE id = $1", orderID).Scan(&id))
	return id
}

// expire moves the order's hold expiry into the past.
func (b *sagaBundle) expire(t *testing.T, orderID uuid.UUID) {
	t.Helper()
	dbtest.Exec(t, b.pool, "UPDATE holds SET expires_at = now() - interval '1 second' WHERE order_id = $1", orderID)
}

// payload decodes an envelope's payload.
func payload[T any](t *testing.T, env outbox.Envelope) T {
	t.Helper()
	var p T
	require.NoError(t, json.Unmarshal(env.Payload, &p))
	return p
}

func TestSagaPaymentAuthorized(t *testing.T) {
	t.Parallel()

	t.Run("DuplicateConfirmsOnce", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t)
		intent := b.pay(t, h.OrderID)
		ev := b.authorized(t, h.OrderID, intent)

		require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, ev))
		require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, ev)) // same event: the inbox skips it
		// The provider sent the fact again under another event id: the
		// state check makes it a no-op, inbox or not.
		require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, h.OrderID, intent)))
		require.NoError(t, b.run(b.saga.PaymentAuthorized, b.authorized(t, h.OrderID, intent)))

		require.Equal(t, state{order: "capture_pending", hold: "confirmed", version: 1, owned: 1}, b.state(t, h.OrderID))
		confirmed := b.events(t, h.OrderID, outbox.TypeOrderConfirmed)
		captures := b.events(t, h.OrderID, outbox.TypeCaptureRequested)
		require.Len(t, confirmed, 1)
		require.Len(t, captures, 1)
		require.Zero(t, b.count(t, h.OrderID, outbox.TypeAuthorizationCancelRequested))
		require.Equal(t, outbox.CaptureRequested{OrderID: h.OrderID, PaymentIntentID: intent}, payload[outbox.CaptureRequested](t, captures[0]))
		require.Equal(t, outbox.OrderConfirmed{OrderID: h.OrderID, HoldID: h.HoldID}, payload[outbox.OrderConfirmed](t, confirmed[0]))
		for _, env := range append(confirmed, captures...) {
			require.Equal(t, ev.CorrelationID, env.CorrelationID)
			require.Equal(t, ev.EventID.String(), env.CausationID)
		}

		// A confirmed hold is never expired, whatever its expires_at says.
		b.expire(t, h.OrderID)
		n, err := b.expirer.ExpireBatch(context.Background())
		require.NoError(t, err)
		require.Zero(t, n)
		require.Equal(t, state{order: "capture_pending", hold: "confirmed", version: 1, owned: 1}, b.state(t, h.OrderID))
	})

	t.Run("WaitsForThePaymentRowAndRecordsTheAuthorization", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t)
		intent := "pi_" + strings.ReplaceAll(uuid.NewString(), "-", "")
		ev := b.authorized(t, h.OrderID, intent)
		require.ErrorIs(t, b.run(b.saga.PaymentAuthorized, ev), purchase.ErrTooEarly,
			"no order is confirmed on an authorization its payment row does not show")
		require.Equal(t, "pending_payment", b.state(t, h.OrderID).order)
		require.Zero(t, b.count(t, h.OrderID, outbox.TypeCaptureRequested))

		dbtest.Exec(t, b.pool, `INSERT INTO payments (order_id, provider, payment_intent_id, client_secret, status, amount_minor, currency)
			SELECT id, 'sandbox', $2, $3, 'requires_payment_method', amount_minor, currency FROM orders WHERE id = $1`,
			h.OrderID, intent, secretMarker)
		require.NoError(t, b.run(b.saga.PaymentAuthorized, ev))
		require.Equal(t, "capture_pending", b.state(t, h.OrderID).order)
		var status string
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT status FROM payments WHERE order_id = $1", h.OrderID).Scan(&status))
		require.Equal(t, "requires_capture", status)

		require.NoError(t, b.run(b.saga.PaymentCaptured, b.captured(t, h.OrderID, intent)))
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT status FROM payments WHERE order_id = $1", h.OrderID).Scan(&status))
		require.Equal(t, "succeeded", status, "the capture is recorded with the order paid")
	})

	t.Run("AfterExpiryCancelsAndFreesTheSeat", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t, b.seats[0], b.seats[1])
		intent := b.pay(t, h.OrderID)
		b.expire(t, h.OrderID)

		ev := b.authorized(t, h.OrderID, intent)
		require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, ev))
		require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, h.OrderID, intent)))

		require.Equal(t, state{order: "failed", hold: "expired", version: 1, owned: 0}, b.state(t, h.OrderID))
		cancels := b.events(t, h.OrderID, outbox.TypeAuthorizationCancelRequested)
		require.Len(t, cancels, 1)
		require.Equal(t, outbox.AuthorizationCancelRequested{OrderID: h.OrderID, PaymentIntentID: intent, Reason: purchase.ReasonHoldExpired},
			payload[outbox.AuthorizationCancelRequested](t, cancels[0]))
		require.Equal(t, ev.EventID.String(), cancels[0].CausationID)
		require.Len(t, b.events(t, h.OrderID, outbox.TypeHoldExpired), 1)
		require.Zero(t, b.count(t, h.OrderID, outbox.TypeCaptureRequested))
		require.Zero(t, b.count(t, h.OrderID, outbox.TypeOrderConfirmed))

		// The seats are free again.
		again := b.hold(t, b.seats[1], b.seats[0])
		require.Equal(t, state{order: "pending_payment", hold: "active", owned: 2}, b.state(t, again.OrderID))
		// The expirer finds nothing left to do.
		n, err := b.expirer.ExpireBatch(context.Background())
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("AfterSeatsReclaimedCancels", func(t *testing.T) {
		t.Parallel()
		// The hold path reclaimed the expired hold's seat but left the hold
		// active; the authorization must not confirm a hold without seats.
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t, b.seats[0])
		intent := b.pay(t, h.OrderID)
		b.expire(t, h.OrderID)
		newer := b.hold(t, b.seats[0])
		dbtest.Exec(t, b.pool, "UPDATE holds SET expires_at = now() + interval '1 hour' WHERE order_id = $1", h.OrderID)

		require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, h.OrderID, intent)))
		require.Equal(t, state{order: "failed", hold: "expired", version: 1, owned: 0}, b.state(t, h.OrderID))
		require.Equal(t, 1, b.count(t, h.OrderID, outbox.TypeAuthorizationCancelRequested))
		require.Zero(t, b.count(t, h.OrderID, outbox.TypeCaptureRequested))
		require.Equal(t, state{order: "pending_payment", hold: "active", owned: 1}, b.state(t, newer.OrderID))
	})

	t.Run("OnCanceledOrderCancelsOnce", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t)
		intent := b.pay(t, h.OrderID)
		dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'canceled' WHERE id = $1", h.OrderID)
		dbtest.Exec(t, b.pool, "UPDATE holds SET status = 'released' WHERE order_id = $1", h.OrderID)

		require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, h.OrderID, intent)))
		require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, h.OrderID, intent)))
		cancels := b.events(t, h.OrderID, outbox.TypeAuthorizationCancelRequested)
		require.Len(t, cancels, 1)
		require.Equal(t, purchase.ReasonOrderCanceled, payload[outbox.AuthorizationCancelRequested](t, cancels[0]).Reason)
		require.Equal(t, "canceled", b.state(t, h.OrderID).order)
	})
}

// Expiry and authorization race under locks: every round has exactly one
// legal outcome, never both, never neither.
func TestSagaExpiryRacesAuthorization(t *testing.T) {
	t.Parallel()
	const rounds = 100
	b := newSagaBundle(t, 10, 10)
	ctx := context.Background()
	outcomes := map[string]int{}
	for round := range rounds {
		h := b.hold(t)
		intent := b.pay(t, h.OrderID)
		ev := b.authorized(t, h.OrderID, intent)
		// Expire the hold within a few milliseconds of now, before or
		// after, so that either side may see it alive.
		offset := time.Duration(round%12-2) * time.Millisecond
		dbtest.Exec(t, b.pool, "UPDATE holds SET expires_at = clock_timestamp() + $2::interval WHERE order_id = $1", h.OrderID, offset)

		start := make(chan struct{})
		var wg sync.WaitGroup
		var sagaErr, expErr error
		wg.Go(func() {
			<-start
			sagaErr = b.apply(t, b.saga.PaymentAuthorized, ev)
		})
		wg.Go(func() {
			<-start
			_, expErr = b.expirer.ExpireBatch(ctx)
		})
		close(start)
		wg.Wait()
		require.NoError(t, sagaErr, "round %d", round)
		require.NoError(t, expErr, "round %d", round)

		s := b.state(t, h.OrderID)
		captures := b.count(t, h.OrderID, outbox.TypeCaptureRequested)
		cancels := b.count(t, h.OrderID, outbox.TypeAuthorizationCancelRequested)
		expired := b.count(t, h.OrderID, outbox.TypeHoldExpired)
		switch s.order {
		case "capture_pending":
			require.Equal(t, state{order: "capture_pending", hold: "confirmed", version: 1, owned: 1}, s, "round %d", round)
			require.Equal(t, 1, captures, "round %d", round)
			require.Equal(t, 1, b.count(t, h.OrderID, outbox.TypeOrderConfirmed), "round %d", round)
			require.Zero(t, cancels, "round %d", round)
			require.Zero(t, expired, "round %d", round)
		case "failed":
			require.Equal(t, state{order: "failed", hold: "expired", version: 1, owned: 0}, s, "round %d", round)
			require.Zero(t, captures, "round %d", round)
			require.Equal(t, 1, cancels, "round %d", round)
			require.Equal(t, 1, expired, "round %d", round)
		default:
			require.Failf(t, "illegal outcome", "round %d: %+v", round, s)
		}
		outcome := s.order
		if s.order == "failed" && b.events(t, h.OrderID, outbox.TypeHoldExpired)[0].CausationID == ev.EventID.String() {
			outcome = "failed_by_saga"
		}
		outcomes[outcome]++
	}
	t.Logf("outcomes over %d rounds: %v", rounds, outcomes)
}

func TestSagaPaymentCaptured(t *testing.T) {
	t.Parallel()

	t.Run("TooEarlyIsRetriedThenApplied", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t, b.seats[2], b.seats[1])
		intent := b.pay(t, h.OrderID)
		capture := b.captured(t, h.OrderID, intent)

		err := b.apply(t, b.saga.PaymentCaptured, capture)
		require.ErrorIs(t, err, purchase.ErrTooEarly)
		require.NotErrorIs(t, err, purchase.ErrPermanent)
		require.Equal(t, state{order: "pending_payment", hold: "active", owned: 2}, b.state(t, h.OrderID))
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM inbox WHERE event_id = $1", capture.EventID))

		require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, h.OrderID, intent)))
		require.NoError(t, b.apply(t, b.saga.PaymentCaptured, capture)) // the retry
		require.NoError(t, b.apply(t, b.saga.PaymentCaptured, b.captured(t, h.OrderID, intent)))

		require.Equal(t, state{order: "paid", hold: "confirmed", version: 2, owned: 2}, b.state(t, h.OrderID))
		issues := b.events(t, h.OrderID, outbox.TypeTicketIssueRequested)
		require.Len(t, issues, 1)
		lo, hi := b.seats[1], b.seats[2]
		if lo.String() > hi.String() {
			lo, hi = hi, lo
		}
		require.Equal(t, outbox.TicketIssueRequested{OrderID: h.OrderID, HoldID: h.HoldID, SeatIDs: []uuid.UUID{lo, hi}},
			payload[outbox.TicketIssueRequested](t, issues[0]))
		require.Equal(t, capture.EventID.String(), issues[0].CausationID)
		require.Zero(t, b.count(t, h.OrderID, outbox.TypeRefundRequested))
	})

	t.Run("AfterReleaseLogsIncidentAndRefundsOnce", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t)
		intent := b.pay(t, h.OrderID)
		b.expire(t, h.OrderID)
		n, err := b.expirer.ExpireBatch(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, n)

		capture := b.captured(t, h.OrderID, intent)
		require.NoError(t, b.apply(t, b.saga.PaymentCaptured, capture))
		require.NoError(t, b.apply(t, b.saga.PaymentCaptured, b.captured(t, h.OrderID, intent)))

		require.Equal(t, state{order: "refunding", hold: "expired", version: 2, owned: 0}, b.state(t, h.OrderID))
		refunds := b.events(t, h.OrderID, outbox.TypeRefundRequested)
		require.Len(t, refunds, 1)
		require.Equal(t, outbox.RefundRequested{OrderID: h.OrderID, PaymentIntentID: intent, Reason: purchase.ReasonCapturedAfterRelease},
			payload[outbox.RefundRequested](t, refunds[0]))
		require.Equal(t, capture.EventID.String(), refunds[0].CausationID)
		require.Zero(t, b.count(t, h.OrderID, outbox.TypeTicketIssueRequested))

		var incidents []map[string]any
		for _, l := range b.logs.Lines(t) {
			if l["level"] == "ERROR" && l["incident"] == purchase.ReasonCapturedAfterRelease {
				incidents = append(incidents, l)
			}
		}
		require.Len(t, incidents, 1)
		require.Equal(t, h.OrderID.String(), incidents[0]["order_id"])
		require.Equal(t, intent, incidents[0]["payment_intent_id"])
		require.Equal(t, capture.EventID.String(), incidents[0]["event_id"])
		require.Equal(t, capture.CorrelationID, incidents[0]["correlation_id"])

		// The refund completes.
		refunded := b.event(t, outbox.TypePaymentRefunded, h.OrderID, outbox.PaymentRefunded{OrderID: h.OrderID, PaymentIntentID: intent, AmountRefunded: 2500})
		require.NoError(t, b.apply(t, b.saga.PaymentRefunded, refunded))
		require.NoError(t, b.apply(t, b.saga.PaymentRefunded, b.event(t, outbox.TypePaymentRefunded, h.OrderID,
			outbox.PaymentRefunded{OrderID: h.OrderID, PaymentIntentID: intent, AmountRefunded: 2500})))
		require.Equal(t, state{order: "refunded", hold: "expired", version: 3, owned: 0}, b.state(t, h.OrderID))
	})
}

func TestSagaPaymentFailed(t *testing.T) {
	t.Parallel()

	decline := func(t *testing.T, b *sagaBundle, orderID uuid.UUID, intent, code string) {
		t.Helper()
		require.NoError(t, b.apply(t, b.saga.PaymentFailed, b.event(t, outbox.TypePaymentFailed, orderID,
			outbox.PaymentFailed{OrderID: orderID, PaymentIntentID: intent, Code: code})))
	}

	// A declined card leaves the order awaiting payment with its seats:
	// the buyer tries again on the same intent, and the authorization of
	// the third attempt confirms the order as if there had been none
	// before.
	t.Run("DeclinesBeforeTheLastAttemptKeepTheSeats", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t, b.seats[0], b.seats[1])
		intent := b.pay(t, h.OrderID)
		ev := b.event(t, outbox.TypePaymentFailed, h.OrderID, outbox.PaymentFailed{OrderID: h.OrderID, PaymentIntentID: intent, Code: "insufficient_funds"})
		require.NoError(t, b.apply(t, b.saga.PaymentFailed, ev))
		require.NoError(t, b.apply(t, b.saga.PaymentFailed, ev), "the same decline delivered again")
		require.Equal(t, state{order: "pending_payment", hold: "active", version: 1, owned: 2}, b.state(t, h.OrderID))
		o, err := b.svc.Order(context.Background(), b.owner(t, h.OrderID), h.OrderID)
		require.NoError(t, err)
		require.Equal(t, 2, o.PaymentAttemptsLeft)
		require.Equal(t, "insufficient_funds", o.LastDecline.Code)
		require.Equal(t, "Your card has insufficient funds.", o.LastDecline.Message)

		decline(t, b, h.OrderID, intent, "card_declined")
		require.Equal(t, state{order: "pending_payment", hold: "active", version: 2, owned: 2}, b.state(t, h.OrderID))
		require.Zero(t, b.count(t, h.OrderID, outbox.TypeAuthorizationCancelRequested))
		_, err = b.tryHold(b.seats[0])
		require.Error(t, err, "the seats stay the buyer's between attempts")

		require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, h.OrderID, intent)))
		require.Equal(t, state{order: "capture_pending", hold: "confirmed", version: 3, owned: 2}, b.state(t, h.OrderID))
		require.Equal(t, 1, b.count(t, h.OrderID, outbox.TypeCaptureRequested))
		o, err = b.svc.Order(context.Background(), b.owner(t, h.OrderID), h.OrderID)
		require.NoError(t, err)
		require.Zero(t, o.PaymentAttemptsLeft, "no attempts once the order no longer awaits payment")
	})

	// The decline that uses up the last attempt fails the order: seats
	// released once, one cancel, and a late authorization changes nothing.
	t.Run("TheLastDeclineFailsAndFreesTheSeats", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t, b.seats[0], b.seats[1])
		intent := b.pay(t, h.OrderID)
		for range purchase.DefaultPaymentAttempts {
			decline(t, b, h.OrderID, intent, "card_declined")
		}
		require.Equal(t, state{order: "failed", hold: "released", version: 4, owned: 0}, b.state(t, h.OrderID))
		decline(t, b, h.OrderID, intent, "card_declined")
		require.Equal(t, state{order: "failed", hold: "released", version: 4, owned: 0}, b.state(t, h.OrderID), "a decline after the failure changes nothing")
		cancels := b.events(t, h.OrderID, outbox.TypeAuthorizationCancelRequested)
		require.Len(t, cancels, 1)
		require.Equal(t, outbox.AuthorizationCancelRequested{OrderID: h.OrderID, PaymentIntentID: intent, Reason: purchase.ReasonPaymentFailed},
			payload[outbox.AuthorizationCancelRequested](t, cancels[0]))
		b.hold(t, b.seats[0], b.seats[1])

		// A late authorization of the failed order asks for no second cancel.
		require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, h.OrderID, intent)))
		require.Equal(t, 1, b.count(t, h.OrderID, outbox.TypeAuthorizationCancelRequested))
		require.Zero(t, b.count(t, h.OrderID, outbox.TypeCaptureRequested))
	})

	// A decline of an earlier attempt applied after a later attempt's
	// authorization (the two events were written in that order, and the
	// bus delivered them the other way round) leaves the paid-for order
	// alone; only a refused capture fails a capture_pending order.
	t.Run("AnEarlierDeclineAfterTheAuthorizationChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t)
		intent := b.pay(t, h.OrderID)
		require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, h.OrderID, intent)))
		decline(t, b, h.OrderID, intent, "card_declined")
		require.Equal(t, state{order: "capture_pending", hold: "confirmed", version: 1, owned: 1}, b.state(t, h.OrderID))
		require.Zero(t, b.count(t, h.OrderID, outbox.TypeAuthorizationCancelRequested))
	})

	// The event's onsale settings say how many attempts a buyer has.
	t.Run("TheEventSetsTheAttempts", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		dbtest.Exec(t, b.pool, "INSERT INTO onsales (event_id, payment_attempts) VALUES ($1, 1)", b.eventID)
		h := b.hold(t)
		intent := b.pay(t, h.OrderID)
		decline(t, b, h.OrderID, intent, "card_declined")
		require.Equal(t, state{order: "failed", hold: "released", version: 2, owned: 0}, b.state(t, h.OrderID))
		require.Equal(t, 1, b.count(t, h.OrderID, outbox.TypeAuthorizationCancelRequested))
	})

	t.Run("CaptureFailedReleasesTheConfirmedHold", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t)
		intent := b.pay(t, h.OrderID)
		require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, h.OrderID, intent)))
		require.Equal(t, "confirmed", b.state(t, h.OrderID).hold)

		require.NoError(t, b.apply(t, b.saga.PaymentFailed, b.event(t, outbox.TypePaymentFailed, h.OrderID,
			outbox.PaymentFailed{OrderID: h.OrderID, PaymentIntentID: intent, Code: "capture_failed"})))
		require.Equal(t, state{order: "failed", hold: "released", version: 2, owned: 0}, b.state(t, h.OrderID))
		require.Equal(t, 1, b.count(t, h.OrderID, outbox.TypeAuthorizationCancelRequested))
		b.hold(t, b.seats[0])
	})

	t.Run("CapturedIntentIsNotCanceled", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t)
		intent := b.pay(t, h.OrderID)
		require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, h.OrderID, intent)))
		dbtest.Exec(t, b.pool, "UPDATE payments SET status = 'succeeded' WHERE order_id = $1", h.OrderID)
		require.NoError(t, b.apply(t, b.saga.PaymentFailed, b.event(t, outbox.TypePaymentFailed, h.OrderID,
			outbox.PaymentFailed{OrderID: h.OrderID, PaymentIntentID: intent, Code: "capture_failed"})))
		require.Equal(t, "failed", b.state(t, h.OrderID).order)
		require.Zero(t, b.count(t, h.OrderID, outbox.TypeAuthorizationCancelRequested))
	})

	t.Run("IgnoredOncePaid", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t)
		intent := b.pay(t, h.OrderID)
		require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, h.OrderID, intent)))
		require.NoError(t, b.apply(t, b.saga.PaymentCaptured, b.captured(t, h.OrderID, intent)))
		require.NoError(t, b.apply(t, b.saga.PaymentFailed, b.event(t, outbox.TypePaymentFailed, h.OrderID,
			outbox.PaymentFailed{OrderID: h.OrderID, PaymentIntentID: intent, Code: "card_declined"})))
		require.Equal(t, state{order: "paid", hold: "confirmed", version: 2, owned: 1}, b.state(t, h.OrderID))
		require.Zero(t, b.count(t, h.OrderID, outbox.TypeAuthorizationCancelRequested))
	})
}

func TestSagaPaymentIntentCreated(t *testing.T) {
	t.Parallel()

	t.Run("LateIntentOfExpiredOrderIsCanceledOnce", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t)
		b.expire(t, h.OrderID)
		_, err := b.expirer.ExpireBatch(context.Background())
		require.NoError(t, err)
		require.Zero(t, b.count(t, h.OrderID, outbox.TypeAuthorizationCancelRequested)) // no intent yet

		intent := b.pay(t, h.OrderID)
		created := func() outbox.Envelope {
			return b.event(t, outbox.TypePaymentIntentCreated, h.OrderID,
				outbox.PaymentIntentCreated{OrderID: h.OrderID, PaymentIntentID: intent, Status: "requires_payment_method"})
		}
		require.NoError(t, b.apply(t, b.saga.PaymentIntentCreated, created()))
		require.NoError(t, b.apply(t, b.saga.PaymentIntentCreated, created()))
		cancels := b.events(t, h.OrderID, outbox.TypeAuthorizationCancelRequested)
		require.Len(t, cancels, 1)
		require.Equal(t, purchase.ReasonHoldExpired, payload[outbox.AuthorizationCancelRequested](t, cancels[0]).Reason)
	})

	t.Run("ExpirerCancelsAndIntentCreatedDoesNotAgain", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t)
		intent := b.pay(t, h.OrderID)
		b.expire(t, h.OrderID)
		_, err := b.expirer.ExpireBatch(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, b.count(t, h.OrderID, outbox.TypeAuthorizationCancelRequested))
		require.NoError(t, b.apply(t, b.saga.PaymentIntentCreated, b.event(t, outbox.TypePaymentIntentCreated, h.OrderID,
			outbox.PaymentIntentCreated{OrderID: h.OrderID, PaymentIntentID: intent})))
		require.Equal(t, 1, b.count(t, h.OrderID, outbox.TypeAuthorizationCancelRequested))
	})

	t.Run("NothingWhilePending", func(t *testing.T) {
		t.Parallel()
		b := newSagaBundle(t, 1, 4)
		h := b.hold(t)
		intent := b.pay(t, h.OrderID)
		require.NoError(t, b.apply(t, b.saga.PaymentIntentCreated, b.event(t, outbox.TypePaymentIntentCreated, h.OrderID,
			outbox.PaymentIntentCreated{OrderID: h.OrderID, PaymentIntentID: intent})))
		require.Zero(t, b.count(t, h.OrderID, outbox.TypeAuthorizationCancelRequested))
		require.Equal(t, state{order: "pending_payment", hold: "active", owned: 1}, b.state(t, h.OrderID))
	})
}

func TestSagaAuthorizationCanceled(t *testing.T) {
	t.Parallel()
	b := newSagaBundle(t, 1, 4)
	h := b.hold(t)
	canceled := func(intent string) outbox.Envelope {
		return b.event(t, outbox.TypeAuthorizationCanceled, h.OrderID, outbox.AuthorizationCanceled{OrderID: h.OrderID, PaymentIntentID: intent})
	}
	early := canceled("pi_early")
	require.ErrorIs(t, b.apply(t, b.saga.AuthorizationCanceled, early), purchase.ErrTooEarly)

	intent := b.pay(t, h.OrderID)
	require.NoError(t, b.apply(t, b.saga.AuthorizationCanceled, canceled("pi_someone_else")))
	require.Equal(t, int64(0), dbtest.Count(t, b.pool, "SELECT count(*) FROM payments WHERE status = 'canceled'"))
	require.NoError(t, b.apply(t, b.saga.AuthorizationCanceled, canceled(intent)))
	require.NoError(t, b.apply(t, b.saga.AuthorizationCanceled, canceled(intent)))
	require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT count(*) FROM payments WHERE status = 'canceled' AND payment_intent_id = $1", intent))
	require.Equal(t, state{order: "pending_payment", hold: "active", owned: 1}, b.state(t, h.OrderID))
}

func TestSagaRejectsUnusableEvents(t *testing.T) {
	t.Parallel()
	b := newSagaBundle(t, 1, 4)
	h := b.hold(t)
	steps := map[string]stepFunc{
		outbox.TypePaymentIntentCreated:  b.saga.PaymentIntentCreated,
		outbox.TypePaymentAuthorized:     b.saga.PaymentAuthorized,
		outbox.TypePaymentCaptured:       b.saga.PaymentCaptured,
		outbox.TypePaymentFailed:         b.saga.PaymentFailed,
		outbox.TypePaymentRefunded:       b.saga.PaymentRefunded,
		outbox.TypeAuthorizationCanceled: b.saga.AuthorizationCanceled,
	}
	for typ, step := range steps {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			ev := b.event(t, typ, h.OrderID, map[string]any{"order_id": h.OrderID})
			ev.Payload = json.RawMessage(`{"order_id": "not-a-uuid", "secret": "` + secretMarker + `"}`)
			err := b.apply(t, step, ev)
			require.ErrorIs(t, err, purchase.ErrPermanent)
			require.NotContains(t, err.Error(), secretMarker)

			other := b.event(t, typ, h.OrderID, map[string]any{"order_id": uuid.New()})
			require.ErrorIs(t, b.apply(t, step, other), purchase.ErrPermanent)

			unknown := b.event(t, typ, h.OrderID, map[string]any{})
			unknown.AggregateID = uuid.New()
			require.ErrorIs(t, b.apply(t, step, unknown), purchase.ErrPermanent)
		})
	}
}

// Every saga log line carries the fields that tie it to its journey.
func TestSagaLogsCarryTracingFields(t *testing.T) {
	t.Parallel()
	b := newSagaBundle(t, 1, 4)
	h := b.hold(t)
	intent := b.pay(t, h.OrderID)
	require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, h.OrderID, intent)))
	require.NoError(t, b.apply(t, b.saga.PaymentCaptured, b.captured(t, h.OrderID, intent)))
	n := 0
	for _, l := range b.logs.Lines(t) {
		if l["component"] != "purchase_saga" {
			continue
		}
		n++
		for _, key := range []string{"correlation_id", "causation_id", "order_id", "event_id"} {
			require.Contains(t, l, key, "log line %v", l)
		}
		require.Equal(t, h.OrderID.String(), l["order_id"])
	}
	require.Positive(t, n)
}

// No client secret ever reaches a log line or an event, whatever path the
// order takes.
func TestSagaNeverLeaksClientSecrets(t *testing.T) {
	t.Parallel()
	b := newSagaBundle(t, 2, 10)
	ctx := context.Background()

	// Paid.
	paid := b.hold(t)
	intent := b.pay(t, paid.OrderID)
	require.NoError(t, b.apply(t, b.saga.PaymentIntentCreated, b.event(t, outbox.TypePaymentIntentCreated, paid.OrderID,
		outbox.PaymentIntentCreated{OrderID: paid.OrderID, PaymentIntentID: intent})))
	require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, paid.OrderID, intent)))
	require.NoError(t, b.apply(t, b.saga.PaymentCaptured, b.captured(t, paid.OrderID, intent)))

	// Expired by the expirer, then captured: refund.
	expired := b.hold(t)
	intent2 := b.pay(t, expired.OrderID)
	b.expire(t, expired.OrderID)
	_, err := b.expirer.ExpireBatch(ctx)
	require.NoError(t, err)
	require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, expired.OrderID, intent2)))
	require.NoError(t, b.apply(t, b.saga.PaymentCaptured, b.captured(t, expired.OrderID, intent2)))

	// Authorized after expiry; then failed; then canceled.
	late := b.hold(t)
	intent3 := b.pay(t, late.OrderID)
	b.expire(t, late.OrderID)
	require.NoError(t, b.apply(t, b.saga.PaymentAuthorized, b.authorized(t, late.OrderID, intent3)))
	declined := b.hold(t)
	intent4 := b.pay(t, declined.OrderID)
	require.NoError(t, b.apply(t, b.saga.PaymentFailed, b.event(t, outbox.TypePaymentFailed, declined.OrderID,
		outbox.PaymentFailed{OrderID: declined.OrderID, PaymentIntentID: intent4})))
	require.NoError(t, b.apply(t, b.saga.PaymentIntentCreated, b.event(t, outbox.TypePaymentIntentCreated, declined.OrderID,
		outbox.PaymentIntentCreated{OrderID: declined.OrderID})))
	require.NoError(t, b.apply(t, b.saga.AuthorizationCanceled, b.event(t, outbox.TypeAuthorizationCanceled, declined.OrderID,
		outbox.AuthorizationCanceled{OrderID: declined.OrderID, PaymentIntentID: intent4})))

	require.Positive(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM payments WHERE client_secret = $1", secretMarker))
	require.Positive(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox"))
	require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE envelope::text LIKE '%TOPSECRET%' OR envelope::text ILIKE '%client_secret%'"))
	require.NotEmpty(t, b.logs.String())
	b.logs.RequireNoSecrets(t, "TOPSECRET", "client_secret")
}
