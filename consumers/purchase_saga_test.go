package consumers_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"boxoffice/consumers"
	"boxoffice/domain/purchase"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
	"boxoffice/platform/outbox"
	"boxoffice/relay"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
	"boxoffice/testkit/natstest"
)

// sagaSecret is the client secret of every payment row here; it must never
// reach a log line or the bus.
const sagaSecret = "pi_x_secret_TOPSECRET"

// sagaWait bounds every wait of these tests.
const sagaWait = 30 * time.Second

// sagaBus is the whole purchase pipeline but the payment provider: a
// database with one event, JetStream, the outbox relay, the purchase
// saga's consumer and the expirer, all running.
type sagaBus struct {
	pool    *pgxpool.Pool
	js      jetstream.JetStream
	svc     *purchase.Service
	logs    *testkit.Log
	eventID uuid.UUID
	seats   []uuid.UUID
}

func newSagaBus(t *testing.T) *sagaBus {
	t.Helper()
	ctx := context.Background()
	b := &sagaBus{pool: dbtest.New(t), logs: testkit.NewLog(t)}
	srv := natstest.New(t)
	nc, js := srv.Connect(t)
	b.js = js
	logger := b.logs.Logger

	ev := fixture.NewEvent(t, b.pool, fixture.EventSpec{Name: "bus", Currency: "usd", SeatsPerRow: 8, PriceMinor: 2500})
	b.eventID = ev.ID
	b.seats = ev.Seats
	b.svc = purchase.NewService(b.pool, logger, purchase.Config{})

	rl, err := relay.New(b.pool, nc, relay.Config{Logger: logger, IdleInterval: 5 * time.Millisecond})
	require.NoError(t, err)
	saga, err := consumers.NewPurchaseSaga(b.pool, js, consumers.Config{
		Logger: logger, BackoffBase: time.Millisecond, BackoffMax: 20 * time.Millisecond, MaxDeliver: 1000,
	}, purchase.NewSaga(purchase.SagaConfig{Logger: logger}))
	require.NoError(t, err)
	expirer := purchase.NewExpirer(b.pool, purchase.ExpirerConfig{Interval: 10 * time.Millisecond, Logger: logger})

	runCtx, cancel := context.WithCancel(ctx)
	runs := []func(context.Context) error{rl.Run, saga.Run, expirer.Run}
	done := make(chan error, len(runs))
	for _, run := range runs {
		go func() { done <- run(runCtx) }()
	}
	t.Cleanup(func() {
		cancel()
		for range runs {
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(sagaWait):
				require.FailNow(t, "a component did not stop")
			}
		}
	})
	return b
}

// write commits env to the outbox, as the webhook ingress does.
func (b *sagaBus) write(t *testing.T, typ string, orderID uuid.UUID, payload any) outbox.Envelope {
	t.Helper()
	var env outbox.Envelope
	require.NoError(t, db.WithTx(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
		var corr string
		if err := tx.QueryRow(ctx, "SELECT correlation_id FROM orders WHERE id = $1", orderID).Scan(&corr); err != nil {
			return err
		}
		var raw []byte
		var err error
		env, raw, err = outbox.NewOrderEvent(typ, orderID, time.Now(), corr, "stripe:evt_"+uuid.NewString(), payload)
		if err != nil {
			return err
		}
		return outbox.Insert(ctx, tx, env, raw)
	}))
	return env
}

// pay writes the payments row the payments worker would and returns the
// intent id.
func (b *sagaBus) pay(t *testing.T, orderID uuid.UUID) string {
	t.Helper()
	intent := "pi_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	dbtest.Exec(t, b.pool, `INSERT INTO payments (order_id, provider, payment_intent_id, client_secret, status, amount_minor, currency)
		SELECT id, 'sandbox', $2, $3, 'requires_capture', amount_minor, currency FROM orders WHERE id = $1`, orderID, intent, sagaSecret)
	return intent
}

// subjects counts the stream's messages per event type.
func (b *sagaBus) subjects(t *testing.T) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sagaWait)
	defer cancel()
	s, err := b.js.Stream(ctx, bus.Stream)
	require.NoError(t, err)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(bus.SubjectPrefix+">"))
	require.NoError(t, err)
	out := map[string]uint64{}
	for subject, n := range info.State.Subjects {
		out[strings.TrimPrefix(subject, bus.SubjectPrefix+outbox.AggregateOrder+".")] = n
	}
	return out
}

func (b *sagaBus) status(t *testing.T, orderID uuid.UUID) string {
	t.Helper()
	var s string
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT status FROM orders WHERE id = $1", orderID).Scan(&s))
	return s
}

// settled reports whether the outbox is empty and the saga consumer has
// nothing pending or unacknowledged.
func (b *sagaBus) settled(t *testing.T) bool {
	t.Helper()
	if dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox") != 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cons, err := b.js.Consumer(ctx, bus.Stream, consumers.PurchaseSagaName)
	if err != nil {
		return false
	}
	info, err := cons.Info(ctx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}

// checkClean fails the test if anything went to the dead-letter stream or
// a client secret reached a log line or a message on the bus.
func (b *sagaBus) checkClean(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sagaWait)
	defer cancel()
	dlq, err := b.js.Stream(ctx, bus.DLQStream)
	require.NoError(t, err)
	dlqInfo, err := dlq.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, dlqInfo.State.Msgs, "dead letters")

	s, err := b.js.Stream(ctx, bus.Stream)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		msg, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		require.NotContains(t, string(msg.Data), "TOPSECRET")
		require.NotContains(t, string(msg.Data), "client_secret")
	}
	b.logs.RequireNoSecrets(t, "TOPSECRET")
}

func TestPurchaseSagaEndToEnd(t *testing.T) {
	t.Parallel()

	t.Run("DuplicateAndEarlyEventsApplyOnce", func(t *testing.T) {
		t.Parallel()
		b := newSagaBus(t)
		h, err := b.svc.Hold(context.Background(), purchase.HoldParams{
			UserID: uuid.New(), EventID: b.eventID, SeatIDs: b.seats[:2], IdempotencyKey: "k", CorrelationID: "corr-e2e",
		})
		require.NoError(t, err)
		// The hold's PaymentAuthorizationRequested → relay.
		require.Eventually(t, func() bool { return b.subjects(t)[outbox.TypePaymentAuthorizationRequested] == 1 }, sagaWait, 10*time.Millisecond)
		intent := b.pay(t, h.OrderID)

		// The capture overtakes its authorization: nakked until the
		// authorization is applied.
		capture := b.write(t, outbox.TypePaymentCaptured, h.OrderID, outbox.PaymentCaptured{OrderID: h.OrderID, PaymentIntentID: intent, AmountReceived: 5000})
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			cons, err := b.js.Consumer(ctx, bus.Stream, consumers.PurchaseSagaName)
			if err != nil {
				return false
			}
			info, err := cons.Info(ctx)
			return err == nil && info.NumRedelivered > 0
		}, sagaWait, 5*time.Millisecond)
		require.Equal(t, "pending_payment", b.status(t, h.OrderID))

		auth := b.write(t, outbox.TypePaymentAuthorized, h.OrderID, outbox.PaymentAuthorized{OrderID: h.OrderID, PaymentIntentID: intent, AmountCapturable: 5000})
		// The same event again on the bus, outside the duplicate window
		// (another Nats-Msg-Id), and the provider's second notice of it.
		raw, err := json.Marshal(auth)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), sagaWait)
		defer cancel()
		_, err = b.js.PublishMsg(ctx, &nats.Msg{Subject: auth.Subject(), Data: raw}, jetstream.WithMsgID("republished-"+auth.EventID.String()))
		require.NoError(t, err)
		b.write(t, outbox.TypePaymentAuthorized, h.OrderID, outbox.PaymentAuthorized{OrderID: h.OrderID, PaymentIntentID: intent, AmountCapturable: 5000})

		require.Eventually(t, func() bool { return b.status(t, h.OrderID) == "paid" && b.settled(t) }, sagaWait, 10*time.Millisecond)
		got := b.subjects(t)
		require.Equal(t, uint64(1), got[outbox.TypeOrderConfirmed])
		require.Equal(t, uint64(1), got[outbox.TypeCaptureRequested])
		require.Equal(t, uint64(1), got[outbox.TypeTicketIssueRequested])
		// One HoldCreated, one authorization request: the hold's own; the
		// saga, which saw every event, turned HoldCreated into no second.
		require.Equal(t, uint64(1), got[outbox.TypeHoldCreated])
		require.Equal(t, uint64(1), got[outbox.TypePaymentAuthorizationRequested])
		require.Zero(t, got[outbox.TypeAuthorizationCancelRequested])
		require.Zero(t, got[outbox.TypeRefundRequested])
		require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT count(*) FROM inbox WHERE consumer = $1 AND event_id = $2", consumers.PurchaseSagaName, capture.EventID))
		require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT count(*) FROM inbox WHERE consumer = $1 AND event_id = $2", consumers.PurchaseSagaName, auth.EventID))
		b.checkClean(t)
	})

	t.Run("AuthorizationAfterExpiryCancelsOnce", func(t *testing.T) {
		t.Parallel()
		b := newSagaBus(t)
		h, err := b.svc.Hold(context.Background(), purchase.HoldParams{
			UserID: uuid.New(), EventID: b.eventID, SeatIDs: b.seats[:1], IdempotencyKey: "k", CorrelationID: "corr-e2e",
		})
		require.NoError(t, err)
		intent := b.pay(t, h.OrderID)
		dbtest.Exec(t, b.pool, "UPDATE holds SET expires_at = now() - interval '1 second' WHERE order_id = $1", h.OrderID)
		require.Eventually(t, func() bool { return b.status(t, h.OrderID) == "failed" }, sagaWait, 10*time.Millisecond)

		b.write(t, outbox.TypePaymentAuthorized, h.OrderID, outbox.PaymentAuthorized{OrderID: h.OrderID, PaymentIntentID: intent, AmountCapturable: 2500})
		b.write(t, outbox.TypePaymentIntentCreated, h.OrderID, outbox.PaymentIntentCreated{OrderID: h.OrderID, PaymentIntentID: intent})
		// Then the capture that should never have happened.
		b.write(t, outbox.TypePaymentCaptured, h.OrderID, outbox.PaymentCaptured{OrderID: h.OrderID, PaymentIntentID: intent, AmountReceived: 2500})
		require.Eventually(t, func() bool { return b.status(t, h.OrderID) == "refunding" && b.settled(t) }, sagaWait, 10*time.Millisecond)

		got := b.subjects(t)
		require.Equal(t, uint64(1), got[outbox.TypeHoldExpired])
		require.Equal(t, uint64(1), got[outbox.TypeAuthorizationCancelRequested])
		require.Equal(t, uint64(1), got[outbox.TypeRefundRequested])
		require.Zero(t, got[outbox.TypeCaptureRequested])
		require.Zero(t, got[outbox.TypeTicketIssueRequested])
		// The seat is free again.
		_, err = b.svc.Hold(context.Background(), purchase.HoldParams{
			UserID: uuid.New(), EventID: b.eventID, SeatIDs: b.seats[:1], IdempotencyKey: "k2",
		})
		require.NoError(t, err)
		b.checkClean(t)
	})
}

func TestPurchaseSagaHandler(t *testing.T) {
	t.Parallel()

	t.Run("ConfigIsValid", func(t *testing.T) {
		t.Parallel()
		cfg := consumers.PurchaseSagaConfig()
		cfg.Logger = slog.New(slog.DiscardHandler)
		require.NoError(t, cfg.Validate())
		require.Equal(t, consumers.PurchaseSagaName, cfg.Name)
		require.Contains(t, cfg.FilterSubjects, "ticketing.order.PaymentAuthorized")
		// The hold transaction requests the authorization itself; a saga
		// reading HoldCreated would request a second one.
		require.NotContains(t, cfg.FilterSubjects, "ticketing.order.HoldCreated")
		require.Len(t, cfg.FilterSubjects, 6)
	})

	t.Run("MapsPermanentAndIgnoresOtherTypes", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.New(t)
		h := consumers.PurchaseSagaHandler(purchase.NewSaga(purchase.SagaConfig{}))
		run := func(ev outbox.Envelope) error {
			return db.WithTx(context.Background(), pool, func(ctx context.Context, tx pgx.Tx) error { return h(ctx, tx, ev) })
		}
		unknown, _, err := outbox.NewOrderEvent(outbox.TypePaymentAuthorized, uuid.New(), time.Now(), "c", "", outbox.PaymentAuthorized{})
		require.NoError(t, err)
		err = run(unknown)
		require.ErrorIs(t, err, consumers.ErrPermanent)
		require.ErrorIs(t, err, purchase.ErrPermanent)

		other, _, err := outbox.NewOrderEvent(outbox.TypeTicketIssued, uuid.New(), time.Now(), "c", "", outbox.TicketIssued{})
		require.NoError(t, err)
		require.NoError(t, run(other))

		// A HoldCreated (one from before the upgrade, say) is not a step:
		// acked without effect, whatever its order.
		created, _, err := outbox.NewOrderEvent(outbox.TypeHoldCreated, uuid.New(), time.Now(), "c", "", outbox.HoldCreated{})
		require.NoError(t, err)
		require.NoError(t, run(created))
		require.Zero(t, dbtest.Count(t, pool, "SELECT count(*) FROM outbox"))
	})
}
