package consumers

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/payments"
	"boxoffice/domain/payments/sandbox"
	"boxoffice/domain/purchase"
	"boxoffice/platform/bus"
	"boxoffice/platform/outbox"
	"boxoffice/sqlcgen"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

// paymentsBundle is a consumer test bundle with a sandbox provider on the
// test's database.
type paymentsBundle struct {
	*testBundle
	sandbox *sandbox.Sandbox
	logger  *slog.Logger
}

// setupPayments returns a bundle whose cleanup proves that no client
// secret of any intent the sandbox created reached a log line, the outbox,
// the stream or the dead-letter stream.
func setupPayments(t *testing.T) *paymentsBundle {
	t.Helper()
	b := &paymentsBundle{testBundle: setup(t)}
	b.logger = slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sb, err := sandbox.New(b.pool, sandbox.Config{Logger: b.logger})
	require.NoError(t, err)
	b.sandbox = sb
	// Registered after setup's cleanups and before any consumer's, so it
	// runs once the consumers stopped and before the servers go away.
	t.Cleanup(func() { b.requireNoSecretLeaked(t) })
	return b
}

func (b *paymentsBundle) requireNoSecretLeaked(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	rows, err := b.pool.Query(ctx, `SELECT client_secret FROM sandbox_payment_intents`)
	require.NoError(t, err)
	secrets, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)

	var places []string
	places = append(places, b.logs.String())
	rows, err = b.pool.Query(ctx, `SELECT envelope::text FROM outbox`)
	require.NoError(t, err)
	envelopes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	places = append(places, envelopes...)
	for _, stream := range []string{bus.Stream, bus.DLQStream} {
		s, err := b.js.Stream(ctx, stream)
		require.NoError(t, err)
		for seq := s.CachedInfo().State.FirstSeq; seq != 0 && seq <= s.CachedInfo().State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			require.NoError(t, err)
			places = append(places, string(m.Data), m.Header.Get(HeaderReason))
		}
	}
	for _, place := range places {
		require.NotContains(t, place, "_secret_", "a client secret leaked")
		for _, s := range secrets {
			require.NotContains(t, place, s, "a client secret leaked")
		}
	}
}

// order inserts an order (with its organizer and event) and returns its id.
func (b *paymentsBundle) order(t *testing.T) uuid.UUID {
	t.Helper()
	org, event, order := uuid.New(), uuid.New(), uuid.New()
	dbtest.Exec(t, b.pool, `INSERT INTO organizers (id) VALUES ($1)`, org)
	dbtest.Exec(t, b.pool, `INSERT INTO events (id, organizer_id, name, starts_at, currency, purchase_cell, seat_count)
		VALUES ($1, $2, 'Test Night', now() + interval '30 days', 'eur', 'default', 1)`, event, org)
	dbtest.Exec(t, b.pool, `INSERT INTO orders (id, user_id, event_id, status, amount_minor, currency, correlation_id)
		VALUES ($1, $2, $3, 'pending_payment', 5000, 'eur', 'corr')`, order, uuid.New(), event)
	// Its hold: the intent is recorded with the order and hold locked.
	dbtest.Exec(t, b.pool, `INSERT INTO holds (id, order_id, status, expires_at)
		VALUES ($1, $2, 'active', now() + interval '10 minutes')`, uuid.New(), order)
	return order
}

// intent creates the order's intent at the sandbox and records its payments
// row, as the authorize step does; authorize also has the buyer confirm it.
func (b *paymentsBundle) intent(t *testing.T, orderID uuid.UUID, authorize bool) payments.Intent {
	t.Helper()
	ctx := context.Background()
	in, err := b.sandbox.CreateIntent(ctx, payments.CreateIntentParams{
		OrderID: orderID, AmountMinor: 5000, Currency: "eur", IdempotencyKey: "authorize:setup-" + orderID.String(),
	})
	require.NoError(t, err)
	n, err := sqlcgen.New().PaymentUpsertIntent(ctx, b.pool, sqlcgen.PaymentUpsertIntentParams{
		OrderID: orderID, Provider: "sandbox", PaymentIntentID: in.ID, ClientSecret: in.ClientSecret,
		Status: string(in.Status), AmountMinor: in.AmountMinor, Currency: in.Currency,
	})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	if authorize {
		in, err = b.sandbox.Authorize(ctx, in.ID)
		require.NoError(t, err)
	}
	return in
}

// command builds a command envelope about orderID.
func command(t *testing.T, eventType string, orderID uuid.UUID, payload any) (outbox.Envelope, []byte) {
	t.Helper()
	ev, raw, err := outbox.NewOrderEvent(eventType, orderID, time.Now(), "corr-"+uuid.NewString(), "cause-"+uuid.NewString(), payload)
	require.NoError(t, err)
	return ev, raw
}

// publishCommand stores the envelope on its subject with msgID, as the
// relay does with msgID = event id, and returns its stream sequence.
func (b *paymentsBundle) publishCommand(t *testing.T, msgID string, ev outbox.Envelope, raw []byte) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ack, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: ev.Subject(), Data: raw}, jetstream.WithMsgID(msgID))
	require.NoError(t, err)
	require.False(t, ack.Duplicate)
	return ack.Sequence
}

// consumer runs the payments consumer on provider, its ExternalFunc
// passed through wrap when wrap is not nil.
func (b *paymentsBundle) consumer(t *testing.T, provider payments.Provider, wrap func(ExternalFunc) ExternalFunc) *Consumer {
	t.Helper()
	pc, err := payments.NewCommands(payments.CommandsConfig{Provider: provider, ProviderName: "sandbox", Logger: b.logger})
	require.NoError(t, err)
	f := PaymentCommandsFunc(pc)
	if wrap != nil {
		f = wrap(f)
	}
	cfg := PaymentCommandsConsumerConfig()
	cfg.AckWait = 5 * time.Second
	c := b.newExternalConsumer(t, cfg, f)
	run(t, c)
	return c
}

// crashBeforeCommit makes the transaction of the first n attempts fail
// after its work ran, as a process that dies before its commit would.
func crashBeforeCommit(n int64) func(ExternalFunc) ExternalFunc {
	var attempts atomic.Int64
	return func(f ExternalFunc) ExternalFunc {
		return func(ctx context.Context, ev outbox.Envelope) (HandlerFunc, error) {
			h, err := f(ctx, ev)
			if err != nil {
				return nil, err
			}
			return func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
				if h != nil {
					if err := h(ctx, tx, ev); err != nil {
						return err
					}
				}
				if attempts.Add(1) <= n {
					return errors.New("process died before commit")
				}
				return nil
			}, nil
		}
	}
}

// outboxEvents returns the envelopes of eventType in the outbox, in order.
func (b *paymentsBundle) outboxEvents(t *testing.T, eventType string) []outbox.Envelope {
	t.Helper()
	return fixture.OutboxEnvelopes(t, b.pool, eventType)
}

func (b *paymentsBundle) payment(t *testing.T, orderID uuid.UUID) sqlcgen.Payment {
	t.Helper()
	p, err := sqlcgen.New().PaymentGetByOrder(context.Background(), b.pool, orderID)
	require.NoError(t, err)
	return p
}

func (b *paymentsBundle) requests(t *testing.T, intentID string, op sandbox.Operation) sandbox.RequestCount {
	t.Helper()
	n, err := b.sandbox.RequestCount(context.Background(), intentID, op)
	require.NoError(t, err)
	return n
}

// webhookTypes lists the types of the webhooks the sandbox queued about the
// intent.
func (b *paymentsBundle) webhookTypes(t *testing.T, intentID string) []string {
	t.Helper()
	evs, err := b.sandbox.WebhookEvents(context.Background(), intentID)
	require.NoError(t, err)
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

// requireCausedBy checks that env follows cause in the same journey.
func requireCausedBy(t *testing.T, cause, env outbox.Envelope) {
	t.Helper()
	require.Equal(t, cause.CorrelationID, env.CorrelationID)
	require.Equal(t, cause.EventID.String(), env.CausationID)
	require.Equal(t, cause.AggregateID, env.AggregateID)
}

// lostResponse is a provider whose first CreateIntent acts but loses its
// answer: the caller sees a retryable network error, as when a connection
// drops after Stripe did the work.
type lostResponse struct {
	*sandbox.Sandbox
	lost atomic.Bool
}

func (p *lostResponse) CreateIntent(ctx context.Context, params payments.CreateIntentParams) (payments.Intent, error) {
	in, err := p.Sandbox.CreateIntent(ctx, params)
	if err == nil && p.lost.CompareAndSwap(false, true) {
		return payments.Intent{}, &payments.Error{Op: "create intent", Code: payments.CodeNetwork, Retryable: true,
			Err: errors.New("connection reset by peer")}
	}
	return in, err
}

// The payments consumer waits out a provider outage of a day: the sum of
// its retry delays before a dead letter, each at the low end of its
// jitter, is at least 24 hours (with the production schedule: the
// consumer's default base and cap).
func TestPaymentCommandsRetryForADay(t *testing.T) {
	cfg := PaymentCommandsConsumerConfig().withDefaults()
	var total time.Duration
	for attempt := uint64(1); attempt < uint64(cfg.MaxDeliver); attempt++ {
		total += backoff(attempt, cfg.BackoffBase, cfg.BackoffMax, -0.1)
	}
	require.GreaterOrEqual(t, total, 24*time.Hour, "retried for %s", total)
	t.Logf("a payment command is retried for at least %s before it is dead-lettered", total.Round(time.Minute))
}

// unreachable is a provider that cannot be reached until up is closed:
// every call fails as a dropped connection does.
type unreachable struct {
	*sandbox.Sandbox
	up    chan struct{}
	calls atomic.Int64
}

func (p *unreachable) Capture(ctx context.Context, intentID, key string) (payments.Intent, error) {
	p.calls.Add(1)
	select {
	case <-p.up:
		return p.Sandbox.Capture(ctx, intentID, key)
	default:
		return payments.Intent{}, &payments.Error{Op: "capture", Code: payments.CodeNetwork, Retryable: true, Err: errors.New("dial tcp: connection refused")}
	}
}

// The provider unreachable for a simulated three hours: the production
// schedule shortened a thousandfold (base 1ms, cap 600ms for 1s and 10m),
// so three hours of outage are about 11 seconds and 22 deliveries. The
// capture is not dead-lettered, and it is applied once the provider is
// back.
func TestPaymentCommandsWaitOutAnOutage(t *testing.T) {
	t.Parallel()
	const scale = 1000
	b := setupPayments(t)
	orderID := b.order(t)
	in := b.intent(t, orderID, true)
	p := &unreachable{Sandbox: b.sandbox, up: make(chan struct{})}
	pc, err := payments.NewCommands(payments.CommandsConfig{Provider: p, ProviderName: "sandbox", Logger: b.logger})
	require.NoError(t, err)
	cfg := PaymentCommandsConsumerConfig()
	cfg.AckWait = 5 * time.Second
	cfg.BackoffBase, cfg.BackoffMax = time.Second/scale, 10*time.Minute/scale
	run(t, b.newExternalConsumer(t, cfg, PaymentCommandsFunc(pc)))

	ev, raw := command(t, outbox.TypeCaptureRequested, orderID, outbox.CaptureRequested{OrderID: orderID, PaymentIntentID: in.ID})
	seq := b.publishCommand(t, ev.EventID.String(), ev, raw)
	// Three hours, scaled: wait on the deliveries the schedule makes in
	// that time rather than on a clock.
	var outage time.Duration
	deliveries := 0
	for d := 1; outage < 3*time.Hour/scale; d++ {
		outage += backoff(uint64(d), cfg.BackoffBase, cfg.BackoffMax, 0)
		deliveries = d + 1
	}
	require.Eventually(t, func() bool { return p.calls.Load() >= int64(deliveries) }, time.Minute, 10*time.Millisecond,
		"the provider was called %d times", p.calls.Load())
	require.Empty(t, b.deadLetters(t), "three hours of outage dead-letter nothing")
	close(p.up)
	b.waitSettled(t, PaymentCommandsName, seq)
	require.Equal(t, int64(1), b.requests(t, in.ID, sandbox.OpCapture).Performed)
	require.Empty(t, b.deadLetters(t))
	t.Logf("the provider was down for %d deliveries (about 3 hours at full scale)", p.calls.Load()-1)
}

func TestPaymentCommands(t *testing.T) {
	t.Parallel()

	t.Run("AuthorizationCreatesOneIntentAndKeepsItsSecretInTheRow", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		orderID, holdID := b.order(t), uuid.New()
		ev, raw := command(t, outbox.TypePaymentAuthorizationRequested, orderID,
			outbox.PaymentAuthorizationRequested{OrderID: orderID, HoldID: holdID, AmountMinor: 5000, Currency: "EUR"})
		seq := b.publishCommand(t, ev.EventID.String(), ev, raw)
		b.consumer(t, b.sandbox, nil)
		b.waitSettled(t, PaymentCommandsName, seq)

		p := b.payment(t, orderID)
		require.Equal(t, "sandbox", p.Provider)
		require.NotNil(t, p.PaymentIntentID)
		intentID := *p.PaymentIntentID
		require.Equal(t, string(payments.StatusRequiresPaymentMethod), p.Status)
		require.Equal(t, int64(5000), p.AmountMinor)
		require.Equal(t, "eur", p.Currency)
		var secret string
		require.NoError(t, b.pool.QueryRow(context.Background(),
			`SELECT client_secret FROM sandbox_payment_intents WHERE id = $1`, intentID).Scan(&secret))
		require.NotNil(t, p.ClientSecret)
		require.Equal(t, secret, *p.ClientSecret, "the row holds the intent's client secret")

		require.Equal(t, sandbox.RequestCount{Requests: 1, Performed: 1}, b.requests(t, intentID, sandbox.OpCreate))
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM sandbox_payment_intents`))
		in, err := b.sandbox.Get(context.Background(), intentID)
		require.NoError(t, err)
		require.Equal(t, map[string]string{"order_id": orderID.String(), "hold_id": holdID.String()}, in.Metadata)

		created := b.outboxEvents(t, outbox.TypePaymentIntentCreated)
		require.Len(t, created, 1)
		requireCausedBy(t, ev, created[0])
		var payload outbox.PaymentIntentCreated
		require.NoError(t, json.Unmarshal(created[0].Payload, &payload))
		require.Equal(t, outbox.PaymentIntentCreated{OrderID: orderID, PaymentIntentID: intentID,
			Status: string(payments.StatusRequiresPaymentMethod)}, payload)
		var fields map[string]any
		require.NoError(t, json.Unmarshal(created[0].Payload, &fields))
		require.Len(t, fields, 3, "order_id, payment_intent_id and status, nothing else")
		require.NotContains(t, string(created[0].Payload), "secret")

		var logged bool
		for _, l := range b.logs.Lines(t) {
			if l["msg"] == "payment intent created at the provider" {
				logged = true
				require.Equal(t, ev.EventID.String(), l["event_id"])
				require.Equal(t, orderID.String(), l["order_id"])
				require.Equal(t, ev.CorrelationID, l["correlation_id"])
				require.Equal(t, ev.CausationID, l["causation_id"])
				require.Equal(t, intentID, l["payment_intent_id"])
				require.Equal(t, PaymentCommandsName, l["consumer"])
			}
		}
		require.True(t, logged)
	})

	// The intent is recorded with the saga's PaymentIntentCreated step
	// applied in the same transaction: the event is written applied by the
	// saga's consumer (which then acks it without a transaction), and an
	// order that failed while the intent was being created has its cancel
	// requested in that commit, with no saga consumer running.
	t.Run("AuthorizationAppliesTheSagaStepWhereTheIntentIsRecorded", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		pending, failed := b.order(t), b.order(t)
		dbtest.Exec(t, b.pool, `UPDATE orders SET status = 'failed' WHERE id = $1`, failed)
		var seq uint64
		for _, orderID := range []uuid.UUID{pending, failed} {
			ev, raw := command(t, outbox.TypePaymentAuthorizationRequested, orderID,
				outbox.PaymentAuthorizationRequested{OrderID: orderID, HoldID: uuid.New(), AmountMinor: 5000, Currency: "eur"})
			seq = b.publishCommand(t, ev.EventID.String(), ev, raw)
		}
		b.consumer(t, b.sandbox, nil)
		b.waitSettled(t, PaymentCommandsName, seq)

		created := b.outboxEvents(t, outbox.TypePaymentIntentCreated)
		require.Len(t, created, 2)
		for _, env := range created {
			require.Equal(t, purchase.SagaConsumer, env.AppliedBy, "order %s", env.AggregateID)
		}
		cancels := b.outboxEvents(t, outbox.TypeAuthorizationCancelRequested)
		require.Len(t, cancels, 1, "only the failed order's intent is canceled")
		require.Equal(t, failed, cancels[0].AggregateID)
		var cancel outbox.AuthorizationCancelRequested
		require.NoError(t, json.Unmarshal(cancels[0].Payload, &cancel))
		require.Equal(t, *b.payment(t, failed).PaymentIntentID, cancel.PaymentIntentID)
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, `SELECT count(*) FROM orders WHERE id = $1 AND status = 'pending_payment'`, pending))
	})

	// An authorization request whose order is not in this database (its
	// event crossed to a standby's stream, the order did not reach the
	// replica) is dead-lettered at its first delivery: no retry brings the
	// order back.
	t.Run("AuthorizationForAnOrderNotInTheDatabaseIsDeadLettered", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		orderID := uuid.New() // never inserted
		ev, raw := command(t, outbox.TypePaymentAuthorizationRequested, orderID,
			outbox.PaymentAuthorizationRequested{OrderID: orderID, HoldID: uuid.New(), AmountMinor: 5000, Currency: "eur"})
		b.publishCommand(t, ev.EventID.String(), ev, raw)
		b.consumer(t, b.sandbox, nil)
		dls := b.waitDeadLetters(t, 1)
		require.Len(t, dls, 1)
		require.Equal(t, uint64(1), b.info(t, PaymentCommandsName).Delivered.Consumer, "dead-lettered at the first delivery, not retried")
		require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM payments`))
	})

	t.Run("RepeatedCommandAndCrashBeforeCommitCreateOneIntent", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		orderID := b.order(t)
		ev, raw := command(t, outbox.TypePaymentAuthorizationRequested, orderID,
			outbox.PaymentAuthorizationRequested{OrderID: orderID, HoldID: uuid.New(), AmountMinor: 5000, Currency: "eur"})
		// The same command twice in the stream (a republish outside the
		// duplicate window), and the first attempt dies after the provider
		// created the intent, before its commit.
		b.publishCommand(t, "copy-1", ev, raw)
		seq := b.publishCommand(t, "copy-2", ev, raw)
		b.consumer(t, b.sandbox, crashBeforeCommit(1))
		b.waitSettled(t, PaymentCommandsName, seq)

		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM sandbox_payment_intents`), "one intent at the provider")
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM payments`))
		intentID := *b.payment(t, orderID).PaymentIntentID
		n := b.requests(t, intentID, sandbox.OpCreate)
		require.Equal(t, int64(1), n.Performed)
		require.GreaterOrEqual(t, n.Replayed, int64(1), "the retry after the crash got the same intent back by its key")
		require.Equal(t, n.Requests, n.Performed+n.Replayed)
		require.Len(t, b.outboxEvents(t, outbox.TypePaymentIntentCreated), 1)
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM inbox WHERE consumer = $1`, PaymentCommandsName))
	})

	t.Run("LostProviderResponseIsRetriedWithTheSameKey", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		orderID := b.order(t)
		ev, raw := command(t, outbox.TypePaymentAuthorizationRequested, orderID,
			outbox.PaymentAuthorizationRequested{OrderID: orderID, HoldID: uuid.New(), AmountMinor: 5000, Currency: "eur"})
		seq := b.publishCommand(t, ev.EventID.String(), ev, raw)
		provider := &lostResponse{Sandbox: b.sandbox}
		b.consumer(t, provider, nil)
		b.waitSettled(t, PaymentCommandsName, seq)

		require.True(t, provider.lost.Load())
		require.Equal(t, uint64(2), b.info(t, PaymentCommandsName).Delivered.Consumer, "nakked and redelivered")
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM sandbox_payment_intents`))
		intentID := *b.payment(t, orderID).PaymentIntentID
		require.Equal(t, sandbox.RequestCount{Requests: 2, Performed: 1, Replayed: 1}, b.requests(t, intentID, sandbox.OpCreate))
		require.Len(t, b.outboxEvents(t, outbox.TypePaymentIntentCreated), 1)
		require.Empty(t, b.deadLetters(t))
	})

	t.Run("CaptureRedeliveredThreeTimesCapturesOnce", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		orderID := b.order(t)
		in := b.intent(t, orderID, true)
		ev, raw := command(t, outbox.TypeCaptureRequested, orderID, outbox.CaptureRequested{OrderID: orderID, PaymentIntentID: in.ID})
		seq := b.publishCommand(t, ev.EventID.String(), ev, raw)
		b.consumer(t, b.sandbox, crashBeforeCommit(2))
		b.waitSettled(t, PaymentCommandsName, seq)

		require.Equal(t, uint64(3), b.info(t, PaymentCommandsName).Delivered.Consumer)
		require.Equal(t, sandbox.RequestCount{Requests: 3, Performed: 1, Replayed: 2}, b.requests(t, in.ID, sandbox.OpCapture))
		require.Equal(t, string(payments.StatusSucceeded), b.payment(t, orderID).Status)
		require.Equal(t, []string{payments.EventAmountCapturableUpdated, payments.EventSucceeded}, b.webhookTypes(t, in.ID),
			"one capture webhook: PaymentCaptured comes from it")
		require.Empty(t, b.outboxEvents(t, outbox.TypePaymentFailed))
		require.Empty(t, b.deadLetters(t))
	})

	t.Run("CaptureOfCanceledIntentFailsThePaymentOnce", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		orderID := b.order(t)
		in := b.intent(t, orderID, true)
		_, err := b.sandbox.Cancel(context.Background(), in.ID, "cancel:"+orderID.String())
		require.NoError(t, err)
		ev, raw := command(t, outbox.TypeCaptureRequested, orderID, outbox.CaptureRequested{OrderID: orderID, PaymentIntentID: in.ID})
		b.publishCommand(t, "copy-1", ev, raw)
		seq := b.publishCommand(t, "copy-2", ev, raw)
		b.consumer(t, b.sandbox, crashBeforeCommit(1))
		b.waitSettled(t, PaymentCommandsName, seq)

		failed := b.outboxEvents(t, outbox.TypePaymentFailed)
		require.Len(t, failed, 1)
		requireCausedBy(t, ev, failed[0])
		var payload outbox.PaymentFailed
		require.NoError(t, json.Unmarshal(failed[0].Payload, &payload))
		require.Equal(t, outbox.PaymentFailed{OrderID: orderID, PaymentIntentID: in.ID, Code: CodeCaptureFailed}, payload)
		require.Equal(t, string(payments.StatusCanceled), b.payment(t, orderID).Status)
		require.Zero(t, b.requests(t, in.ID, sandbox.OpCapture).Performed)
		require.Empty(t, b.deadLetters(t))
	})

	// The capture's mirror of the provider's status does not wait for a
	// transaction that is writing the payments row (the capture webhook,
	// applied under the order's lock, which records the same fact): the
	// command settles while that transaction still holds the row.
	t.Run("CaptureDoesNotWaitForTheWebhooksWriteOfTheRow", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		orderID := b.order(t)
		in := b.intent(t, orderID, true)
		before := b.payment(t, orderID).Status
		webhook, err := b.pool.Begin(context.Background())
		require.NoError(t, err)
		defer func() { _ = webhook.Rollback(context.Background()) }()
		_, err = webhook.Exec(context.Background(), "SELECT 1 FROM payments WHERE order_id = $1 FOR UPDATE", orderID)
		require.NoError(t, err)

		ev, raw := command(t, outbox.TypeCaptureRequested, orderID, outbox.CaptureRequested{OrderID: orderID, PaymentIntentID: in.ID})
		seq := b.publishCommand(t, ev.EventID.String(), ev, raw)
		b.consumer(t, b.sandbox, nil)
		b.waitSettled(t, PaymentCommandsName, seq)

		require.Equal(t, int64(1), b.requests(t, in.ID, sandbox.OpCapture).Performed)
		require.NoError(t, webhook.Rollback(context.Background()))
		require.Equal(t, before, b.payment(t, orderID).Status, "the row was left to the transaction writing it")
	})

	t.Run("CaptureRefusedForACapturedIntentDoesNotFailThePayment", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		orderID := b.order(t)
		in := b.intent(t, orderID, true)
		// Captured under another key (the provider forgot ours, or someone
		// used the dashboard): our capture is refused.
		_, err := b.sandbox.Capture(context.Background(), in.ID, "capture:dashboard")
		require.NoError(t, err)
		ev, raw := command(t, outbox.TypeCaptureRequested, orderID, outbox.CaptureRequested{OrderID: orderID, PaymentIntentID: in.ID})
		seq := b.publishCommand(t, ev.EventID.String(), ev, raw)
		b.consumer(t, b.sandbox, nil)
		b.waitSettled(t, PaymentCommandsName, seq)

		require.Equal(t, int64(1), b.requests(t, in.ID, sandbox.OpCapture).Rejected)
		require.Empty(t, b.outboxEvents(t, outbox.TypePaymentFailed))
		require.Equal(t, string(payments.StatusSucceeded), b.payment(t, orderID).Status)
		require.Empty(t, b.deadLetters(t))
	})

	t.Run("CancelReleasesTheAuthorization", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		orderID := b.order(t)
		in := b.intent(t, orderID, true)
		ev, raw := command(t, outbox.TypeAuthorizationCancelRequested, orderID,
			outbox.AuthorizationCancelRequested{OrderID: orderID, PaymentIntentID: in.ID, Reason: "hold_expired"})
		seq := b.publishCommand(t, ev.EventID.String(), ev, raw)
		b.consumer(t, b.sandbox, crashBeforeCommit(1))
		b.waitSettled(t, PaymentCommandsName, seq)

		require.Equal(t, sandbox.RequestCount{Requests: 2, Performed: 1, Replayed: 1}, b.requests(t, in.ID, sandbox.OpCancel))
		require.Equal(t, string(payments.StatusCanceled), b.payment(t, orderID).Status)
		require.Zero(t, b.count(t, `SELECT count(*) FROM outbox`), "no event: the provider's webhook brings AuthorizationCanceled")
	})

	t.Run("CancelOfAnIntentThatCannotBeCanceledIsAcked", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		orderID := b.order(t)
		in := b.intent(t, orderID, true)
		_, err := b.sandbox.Cancel(context.Background(), in.ID, "cancel:elsewhere")
		require.NoError(t, err)
		ev, raw := command(t, outbox.TypeAuthorizationCancelRequested, orderID,
			outbox.AuthorizationCancelRequested{OrderID: orderID, PaymentIntentID: in.ID, Reason: "order_canceled"})
		seq := b.publishCommand(t, ev.EventID.String(), ev, raw)
		b.consumer(t, b.sandbox, nil)
		b.waitSettled(t, PaymentCommandsName, seq)

		require.Equal(t, uint64(1), b.info(t, PaymentCommandsName).Delivered.Consumer, "acked, not retried")
		require.Equal(t, int64(1), b.requests(t, in.ID, sandbox.OpCancel).Rejected)
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM inbox WHERE event_id = $1`, ev.EventID))
		require.Empty(t, b.deadLetters(t))
	})

	t.Run("RefundRedeliveredThreeTimesRefundsOnce", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		orderID := b.order(t)
		in := b.intent(t, orderID, true)
		_, err := b.sandbox.Capture(context.Background(), in.ID, "capture:"+orderID.String())
		require.NoError(t, err)
		ev, raw := command(t, outbox.TypeRefundRequested, orderID,
			outbox.RefundRequested{OrderID: orderID, PaymentIntentID: in.ID, Reason: "captured_after_release"})
		seq := b.publishCommand(t, ev.EventID.String(), ev, raw)
		b.consumer(t, b.sandbox, crashBeforeCommit(2))
		b.waitSettled(t, PaymentCommandsName, seq)

		require.Equal(t, uint64(3), b.info(t, PaymentCommandsName).Delivered.Consumer)
		require.Equal(t, sandbox.RequestCount{Requests: 3, Performed: 1, Replayed: 2}, b.requests(t, in.ID, sandbox.OpRefund))
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM sandbox_refunds`))
		types := b.webhookTypes(t, in.ID)
		require.Equal(t, payments.EventChargeRefunded, types[len(types)-1])
		require.Empty(t, b.deadLetters(t))
	})

	t.Run("PartialRefundsRefundTheirAmountOnceEach", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		orderID := b.order(t)
		in := b.intent(t, orderID, true)
		_, err := b.sandbox.Capture(context.Background(), in.ID, "capture:"+orderID.String())
		require.NoError(t, err)
		publish := func(cmd outbox.RefundRequested) uint64 {
			ev, raw := command(t, outbox.TypeRefundRequested, orderID, cmd)
			return b.publishCommand(t, ev.EventID.String(), ev, raw)
		}
		amounts := func() []int64 {
			rows, err := b.pool.Query(context.Background(), "SELECT amount FROM sandbox_refunds WHERE payment_intent_id = $1 ORDER BY amount", in.ID)
			require.NoError(t, err)
			got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			require.NoError(t, err)
			return got
		}
		// Two refunds of selected tickets, each delivered and crashed
		// before commit three times, in whatever order the consumer takes
		// them.
		publish(outbox.RefundRequested{OrderID: orderID, PaymentIntentID: in.ID, Reason: "requested_by_organizer", RefundID: uuid.New(), AmountMinor: 1000})
		seq := publish(outbox.RefundRequested{OrderID: orderID, PaymentIntentID: in.ID, Reason: "requested_by_organizer", RefundID: uuid.New(), AmountMinor: 500})
		b.consumer(t, b.sandbox, crashBeforeCommit(6))
		b.waitSettled(t, PaymentCommandsName, seq)
		require.Equal(t, []int64{500, 1000}, amounts(), "each partial refund once, with its amount")
		// Then the whole refund: what they left.
		b.waitSettled(t, PaymentCommandsName, publish(outbox.RefundRequested{OrderID: orderID, PaymentIntentID: in.ID, Reason: "requested_by_organizer"}))
		require.Equal(t, []int64{500, 1000, 3500}, amounts())
		require.Equal(t, int64(3), b.requests(t, in.ID, sandbox.OpRefund).Performed)
		require.Empty(t, b.deadLetters(t))
	})

	// A whole refund and a partial one it follows, taken in either order
	// (the consumer does not keep order between messages): taken first,
	// the whole refund refunds everything and the partial one finds
	// nothing left and is acked; taken second, it refunds what the partial
	// one left. The charge is refunded exactly once in full either way.
	t.Run("WholeAndPartialRefundInEitherOrderRefundTheChargeOnce", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		orderID := b.order(t)
		in := b.intent(t, orderID, true)
		_, err := b.sandbox.Capture(context.Background(), in.ID, "capture:"+orderID.String())
		require.NoError(t, err)
		whole, wholeRaw := command(t, outbox.TypeRefundRequested, orderID, outbox.RefundRequested{OrderID: orderID, PaymentIntentID: in.ID, Reason: "requested_by_organizer"})
		b.publishCommand(t, whole.EventID.String(), whole, wholeRaw)
		part, partRaw := command(t, outbox.TypeRefundRequested, orderID, outbox.RefundRequested{OrderID: orderID, PaymentIntentID: in.ID, Reason: "requested_by_organizer", RefundID: uuid.New(), AmountMinor: 1000})
		seq := b.publishCommand(t, part.EventID.String(), part, partRaw)
		b.consumer(t, b.sandbox, nil)
		b.waitSettled(t, PaymentCommandsName, seq)
		require.Equal(t, int64(5000), b.count(t, `SELECT sum(amount) FROM sandbox_refunds`))
		require.Empty(t, b.deadLetters(t))
	})

	t.Run("RefundOfARefundedIntentIsAcked", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		orderID := b.order(t)
		in := b.intent(t, orderID, true)
		_, err := b.sandbox.Capture(context.Background(), in.ID, "capture:"+orderID.String())
		require.NoError(t, err)
		_, err = b.sandbox.Refund(context.Background(), in.ID, 0, "refund:support-desk")
		require.NoError(t, err)
		ev, raw := command(t, outbox.TypeRefundRequested, orderID,
			outbox.RefundRequested{OrderID: orderID, PaymentIntentID: in.ID, Reason: "organizer_refund"})
		seq := b.publishCommand(t, ev.EventID.String(), ev, raw)
		b.consumer(t, b.sandbox, nil)
		b.waitSettled(t, PaymentCommandsName, seq)

		require.Equal(t, uint64(1), b.info(t, PaymentCommandsName).Delivered.Consumer)
		require.Equal(t, int64(1), b.requests(t, in.ID, sandbox.OpRefund).Rejected)
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM sandbox_refunds`))
		require.Empty(t, b.deadLetters(t))
	})

	t.Run("RefusalWithoutASagaAnswerDeadLetters", func(t *testing.T) {
		t.Parallel()
		b := setupPayments(t)
		orderID := b.order(t)
		ev, raw := command(t, outbox.TypeRefundRequested, orderID,
			outbox.RefundRequested{OrderID: orderID, PaymentIntentID: "pi_unknown", Reason: "organizer_refund"})
		seq := b.publishCommand(t, ev.EventID.String(), ev, raw)
		b.consumer(t, b.sandbox, nil)

		dl := b.waitDeadLetters(t, 1)[0]
		b.waitSettled(t, PaymentCommandsName, seq)
		require.Equal(t, "1", dl.Header.Get(HeaderNumDelivered), "not retried")
		require.True(t, strings.HasPrefix(dl.Header.Get(HeaderReason), "permanent failure: payments: refund pi_unknown: resource_missing"),
			dl.Header.Get(HeaderReason))
		require.Zero(t, b.count(t, `SELECT count(*) FROM inbox`))
	})
}

func TestNewPaymentCommandsValidates(t *testing.T) {
	t.Parallel()
	_, err := payments.NewCommands(payments.CommandsConfig{})
	require.ErrorContains(t, err, "Provider is required")
	require.ErrorContains(t, err, "ProviderName is required")
	require.ErrorContains(t, err, "Logger is required")
	cfg := PaymentCommandsConsumerConfig()
	cfg.Logger = slog.New(slog.DiscardHandler)
	require.NoError(t, cfg.Validate())
	require.Equal(t, "payments", cfg.Name)
	require.True(t, cfg.DoubleAck)
}
