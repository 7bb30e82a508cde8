package sandbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/webhook"
	"golang.org/x/sync/errgroup"

	"boxoffice/domain/payments"
	"boxoffice/domain/payments/sandbox"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// waitTimeout bounds every wait for something asynchronous.
const waitTimeout = 30 * time.Second

const webhookSecret = "whsec_test_sandbox"

type sandboxBundle struct {
	pool *pgxpool.Pool
	recv *webhookReceiver
	// logs holds everything the sandbox logged, at debug level and up.
	logs *testkit.Log
	cfg  sandbox.Config
	// delivered is the set of events the sender has recorded as
	// delivered; deliveredChanged is signalled when it grows.
	deliveredMu      sync.Mutex
	delivered        map[string]bool
	deliveredChanged chan struct{}
}

// setupSandbox returns a sandbox on a fresh database whose webhooks go to
// a recording receiver, with its sender running until the test ends.
func setupSandbox(t *testing.T) (*sandbox.Sandbox, *sandboxBundle) {
	t.Helper()
	b := &sandboxBundle{pool: dbtest.New(t), recv: newWebhookReceiver(t, webhookSecret), logs: testkit.NewLog(t, testkit.Text())}
	b.cfg = sandbox.Config{
		WebhookURL:          b.recv.srv.URL + "/v1/webhooks/stripe",
		WebhookSecret:       webhookSecret,
		WebhookRetryMin:     10 * time.Millisecond,
		WebhookRetryMax:     50 * time.Millisecond,
		WebhookPollInterval: 20 * time.Millisecond,
		Logger:              b.logs.Logger,
	}
	b.delivered, b.deliveredChanged = map[string]bool{}, make(chan struct{}, 1)
	sb := b.newSandbox(t, b.pool)
	sandbox.SetAttemptedFunc(sb, func(eventID string, delivered bool) {
		if !delivered {
			return
		}
		b.deliveredMu.Lock()
		b.delivered[eventID] = true
		b.deliveredMu.Unlock()
		select {
		case b.deliveredChanged <- struct{}{}:
		default:
		}
	})
	startSender(t, sb)
	return sb, b
}

// waitDelivered waits until the sender has recorded eventID as delivered.
func (b *sandboxBundle) waitDelivered(t *testing.T, eventID string) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		b.deliveredMu.Lock()
		done := b.delivered[eventID]
		b.deliveredMu.Unlock()
		if done {
			return
		}
		select {
		case <-b.deliveredChanged:
		case <-deadline:
			require.FailNow(t, "timed out waiting for the sender to record "+eventID+" as delivered")
		}
	}
}

// newSandbox returns another Sandbox on pool with the bundle's config, as
// another process would have.
func (b *sandboxBundle) newSandbox(t *testing.T, pool *pgxpool.Pool) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.New(pool, b.cfg)
	require.NoError(t, err)
	return sb
}

// startSender runs sb's webhook sender until the test ends or stop is
// called. stop returns once the sender has recorded its last attempt.
func startSender(t *testing.T, sb *sandbox.Sandbox) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sb.RunWebhookSender(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(waitTimeout):
			t.Error("webhook sender did not stop")
		}
	})
	t.Cleanup(stop)
	return stop
}

func newOrder() (uuid.UUID, payments.CreateIntentParams) {
	orderID := uuid.New()
	return orderID, payments.CreateIntentParams{
		OrderID:        orderID,
		AmountMinor:    2500,
		Currency:       "USD",
		IdempotencyKey: "authorize:" + uuid.NewString(),
		Metadata:       map[string]string{"hold_id": uuid.NewString()},
	}
}

// createAuthorized creates an intent for a new order and has the buyer
// authorize it.
func createAuthorized(t *testing.T, sb *sandbox.Sandbox) (uuid.UUID, payments.Intent) {
	t.Helper()
	ctx := t.Context()
	orderID, p := newOrder()
	in, err := sb.CreateIntent(ctx, p)
	require.NoError(t, err)
	in, err = sb.Authorize(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, payments.StatusRequiresCapture, in.Status)
	return orderID, in
}

func requireCode(t *testing.T, err error, code string, retryable bool) *payments.Error {
	t.Helper()
	var pe *payments.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, code, pe.Code, "error: %v", err)
	require.Equal(t, retryable, pe.Retryable, "error: %v", err)
	require.Equal(t, retryable, payments.IsRetryable(err))
	return pe
}

func TestSandbox(t *testing.T) {
	t.Parallel()

	t.Run("CreateAuthorizeCaptureSendsWebhooksInOrder", func(t *testing.T) {
		t.Parallel()
		sb, b := setupSandbox(t)
		ctx := t.Context()
		orderID, p := newOrder()

		created, err := sb.CreateIntent(ctx, p)
		require.NoError(t, err)
		require.Regexp(t, `^pi_[0-9A-Za-z]{24}$`, created.ID)
		require.Regexp(t, `^`+created.ID+`_secret_[0-9A-Za-z]{25}$`, created.ClientSecret)
		require.Equal(t, payments.StatusRequiresPaymentMethod, created.Status)
		require.Equal(t, int64(2500), created.AmountMinor)
		require.Equal(t, "usd", created.Currency)
		require.Equal(t, orderID.String(), created.Metadata["order_id"])
		require.Equal(t, p.Metadata["hold_id"], created.Metadata["hold_id"])
		require.WithinDuration(t, time.Now(), created.Created, time.Minute)

		authorized, err := sb.Authorize(ctx, created.ID)
		require.NoError(t, err)
		require.Equal(t, payments.StatusRequiresCapture, authorized.Status)
		require.Equal(t, int64(2500), authorized.AmountCapturable)
		require.Equal(t, int64(0), authorized.AmountReceived)
		b.recv.wait(t, created.ID, payments.EventAmountCapturableUpdated)

		captured, err := sb.Capture(ctx, created.ID, "capture:"+orderID.String())
		require.NoError(t, err)
		require.Equal(t, payments.StatusSucceeded, captured.Status)
		require.Equal(t, int64(0), captured.AmountCapturable)
		require.Equal(t, int64(2500), captured.AmountReceived)
		require.Equal(t, created.ClientSecret, captured.ClientSecret)

		events := b.recv.wait(t, created.ID, payments.EventAmountCapturableUpdated, payments.EventSucceeded)
		for i, want := range []payments.IntentStatus{payments.StatusRequiresCapture, payments.StatusSucceeded} {
			ev := events[i]
			require.Equal(t, "event", ev.Object)
			require.Equal(t, stripe.APIVersion, ev.APIVersion)
			require.False(t, ev.Livemode)
			require.Regexp(t, `^evt_[0-9A-Za-z]{24}$`, ev.ID)
			var pi stripe.PaymentIntent
			require.NoError(t, json.Unmarshal(ev.Data.Raw, &pi))
			require.Equal(t, created.ID, pi.ID)
			require.Equal(t, string(want), string(pi.Status))
			require.Equal(t, stripe.PaymentIntentCaptureMethodManual, pi.CaptureMethod)
			require.Equal(t, orderID.String(), pi.Metadata["order_id"])
			require.Empty(t, pi.ClientSecret, "events leave the client secret out")
		}
		require.Equal(t, "capture:"+orderID.String(), events[1].Request.IdempotencyKey)

		got, err := sb.Get(ctx, created.ID)
		require.NoError(t, err)
		require.Equal(t, captured, got)
	})

	t.Run("CaptureRetriedCapturesOnce", func(t *testing.T) {
		t.Parallel()
		sb, b := setupSandbox(t)
		ctx := t.Context()
		orderID, in := createAuthorized(t, sb)
		key := "capture:" + orderID.String()

		// Ten first attempts race for the key.
		const n = 10
		results := make([]payments.Intent, n)
		start := make(chan struct{})
		var g errgroup.Group
		for i := range n {
			g.Go(func() error {
				<-start
				var err error
				results[i], err = sb.Capture(ctx, in.ID, key)
				return err
			})
		}
		close(start)
		require.NoError(t, g.Wait())
		for _, r := range results {
			require.Equal(t, results[0], r)
		}
		require.Equal(t, payments.StatusSucceeded, results[0].Status)

		// A retry long after replays the same response.
		again, err := sb.Capture(ctx, in.ID, key)
		require.NoError(t, err)
		require.Equal(t, results[0], again)

		count, err := sb.RequestCount(ctx, in.ID, sandbox.OpCapture)
		require.NoError(t, err)
		require.Equal(t, sandbox.RequestCount{Requests: n + 1, Performed: 1, Replayed: n}, count)
		require.Equal(t, int64(2500), dbtest.Count(t, b.pool, "SELECT amount_received FROM sandbox_payment_intents WHERE id = $1", in.ID))
		require.Equal(t, []string{payments.EventAmountCapturableUpdated, payments.EventSucceeded}, queuedTypes(t, sb, in.ID))
		b.recv.wait(t, in.ID, payments.EventAmountCapturableUpdated, payments.EventSucceeded)
	})

	t.Run("PartialRefundsAddUp", func(t *testing.T) {
		t.Parallel()
		sb, b := setupSandbox(t)
		ctx := t.Context()
		orderID, in := createAuthorized(t, sb)
		_, err := sb.Capture(ctx, in.ID, "capture:"+orderID.String())
		require.NoError(t, err)

		part, err := sb.Refund(ctx, in.ID, 1000, "refund:part-1")
		require.NoError(t, err)
		require.Equal(t, int64(1000), part.AmountMinor)
		again, err := sb.Refund(ctx, in.ID, 1000, "refund:part-1")
		require.NoError(t, err)
		require.Equal(t, part, again, "a retried partial refund is replayed, not refunded twice")
		_, err = sb.Refund(ctx, in.ID, 2000, "refund:too-much")
		requireCode(t, err, payments.CodeInvalidRequest, false)
		rest, err := sb.Refund(ctx, in.ID, 0, "refund:"+orderID.String())
		require.NoError(t, err)
		require.Equal(t, int64(1500), rest.AmountMinor, "no amount: what is left")
		_, err = sb.Refund(ctx, in.ID, 0, "refund:another-key")
		requireCode(t, err, payments.CodeChargeAlreadyRefunded, false)
		require.Equal(t, int64(2500), dbtest.Count(t, b.pool, "SELECT sum(amount) FROM sandbox_refunds WHERE payment_intent_id = $1", in.ID))

		events := b.recv.wait(t, in.ID, payments.EventAmountCapturableUpdated, payments.EventSucceeded, payments.EventChargeRefunded, payments.EventChargeRefunded)
		var first, second stripe.Charge
		require.NoError(t, json.Unmarshal(events[2].Data.Raw, &first))
		require.NoError(t, json.Unmarshal(events[3].Data.Raw, &second))
		require.Equal(t, []int64{1000, 2500}, []int64{first.AmountRefunded, second.AmountRefunded}, "the charge's refunded total, each time")
		require.Equal(t, []bool{false, true}, []bool{first.Refunded, second.Refunded})
	})

	t.Run("RefundRetriedRefundsOnce", func(t *testing.T) {
		t.Parallel()
		sb, b := setupSandbox(t)
		ctx := t.Context()
		orderID, in := createAuthorized(t, sb)
		_, err := sb.Capture(ctx, in.ID, "capture:"+orderID.String())
		require.NoError(t, err)

		key := "refund:" + orderID.String()
		first, err := sb.Refund(ctx, in.ID, 0, key)
		require.NoError(t, err)
		require.Regexp(t, `^re_[0-9A-Za-z]{24}$`, first.ID)
		require.Equal(t, in.ID, first.IntentID)
		require.Equal(t, int64(2500), first.AmountMinor)
		require.Equal(t, "usd", first.Currency)
		require.Equal(t, "succeeded", first.Status)

		again, err := sb.Refund(ctx, in.ID, 0, key)
		require.NoError(t, err)
		require.Equal(t, first, again)

		_, err = sb.Refund(ctx, in.ID, 0, "refund:another-key")
		requireCode(t, err, payments.CodeChargeAlreadyRefunded, false)

		count, err := sb.RequestCount(ctx, in.ID, sandbox.OpRefund)
		require.NoError(t, err)
		require.Equal(t, sandbox.RequestCount{Requests: 3, Performed: 1, Replayed: 1, Rejected: 1}, count)
		require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT count(*) FROM sandbox_refunds WHERE payment_intent_id = $1", in.ID))

		events := b.recv.wait(t, in.ID, payments.EventAmountCapturableUpdated, payments.EventSucceeded, payments.EventChargeRefunded)
		var ch stripe.Charge
		require.NoError(t, json.Unmarshal(events[2].Data.Raw, &ch))
		require.True(t, ch.Refunded)
		require.Equal(t, int64(2500), ch.AmountRefunded)
		require.Equal(t, in.ID, ch.PaymentIntent.ID)
		require.Equal(t, orderID.String(), ch.Metadata["order_id"])
		require.Len(t, ch.Refunds.Data, 1)
		require.Equal(t, first.ID, ch.Refunds.Data[0].ID)

		// The intent itself stays succeeded, as on Stripe.
		got, err := sb.Get(ctx, in.ID)
		require.NoError(t, err)
		require.Equal(t, payments.StatusSucceeded, got.Status)
	})

	t.Run("DeclineSendsPaymentFailedAndAllowsAnotherCard", func(t *testing.T) {
		t.Parallel()
		sb, b := setupSandbox(t)
		ctx := t.Context()
		_, p := newOrder()
		in, err := sb.CreateIntent(ctx, p)
		require.NoError(t, err)

		declined, err := sb.Decline(ctx, in.ID)
		require.NoError(t, err)
		require.Equal(t, payments.StatusRequiresPaymentMethod, declined.Status)
		require.Equal(t, &payments.PaymentError{Code: "card_declined", DeclineCode: "generic_decline", Message: "Your card was declined."}, declined.LastPaymentError)

		events := b.recv.wait(t, in.ID, payments.EventPaymentFailed)
		var pi stripe.PaymentIntent
		require.NoError(t, json.Unmarshal(events[0].Data.Raw, &pi))
		require.Equal(t, stripe.PaymentIntentStatusRequiresPaymentMethod, pi.Status)
		require.NotNil(t, pi.LastPaymentError)
		require.Equal(t, stripe.ErrorCodeCardDeclined, pi.LastPaymentError.Code)

		authorized, err := sb.Authorize(ctx, in.ID)
		require.NoError(t, err)
		require.Equal(t, payments.StatusRequiresCapture, authorized.Status)
		require.Nil(t, authorized.LastPaymentError)
		b.recv.wait(t, in.ID, payments.EventPaymentFailed, payments.EventAmountCapturableUpdated)
	})

	t.Run("CancelAfterAuthorizeThenCaptureIsPermanent", func(t *testing.T) {
		t.Parallel()
		sb, b := setupSandbox(t)
		ctx := t.Context()
		orderID, in := createAuthorized(t, sb)

		canceled, err := sb.Cancel(ctx, in.ID, "cancel:"+orderID.String())
		require.NoError(t, err)
		require.Equal(t, payments.StatusCanceled, canceled.Status)
		require.Equal(t, int64(0), canceled.AmountCapturable)
		b.recv.wait(t, in.ID, payments.EventAmountCapturableUpdated, payments.EventCanceled)

		key := "capture:" + orderID.String()
		_, err = sb.Capture(ctx, in.ID, key)
		pe := requireCode(t, err, payments.CodeUnexpectedState, false)
		require.Equal(t, http.StatusBadRequest, pe.HTTPStatus)
		require.Contains(t, pe.Message, "status of canceled")

		// Like Stripe, the key stored the refusal: a retry replays it.
		_, err2 := sb.Capture(ctx, in.ID, key)
		require.Equal(t, err, err2)
		count, err := sb.RequestCount(ctx, in.ID, sandbox.OpCapture)
		require.NoError(t, err)
		require.Equal(t, sandbox.RequestCount{Requests: 2, Replayed: 1, Rejected: 1}, count)

		_, err = sb.Cancel(ctx, in.ID, "cancel:again")
		requireCode(t, err, payments.CodeUnexpectedState, false)
		_, err = sb.Authorize(ctx, in.ID)
		requireCode(t, err, payments.CodeUnexpectedState, false)
		_, err = sb.Refund(ctx, in.ID, 0, "refund:"+orderID.String())
		requireCode(t, err, payments.CodeUnexpectedState, false)
		require.Equal(t, []string{payments.EventAmountCapturableUpdated, payments.EventCanceled}, queuedTypes(t, sb, in.ID))
	})

	t.Run("CaptureBeforeAuthorizationIsPermanent", func(t *testing.T) {
		t.Parallel()
		sb, _ := setupSandbox(t)
		ctx := t.Context()
		orderID, p := newOrder()
		in, err := sb.CreateIntent(ctx, p)
		require.NoError(t, err)
		_, err = sb.Capture(ctx, in.ID, "capture:"+orderID.String())
		requireCode(t, err, payments.CodeUnexpectedState, false)
	})

	t.Run("CreateRetriedReturnsTheSameIntent", func(t *testing.T) {
		t.Parallel()
		sb, b := setupSandbox(t)
		ctx := t.Context()
		_, p := newOrder()
		first, err := sb.CreateIntent(ctx, p)
		require.NoError(t, err)
		// The intent moves on; the replay still answers what the first
		// call answered, as Stripe's does.
		_, err = sb.Authorize(ctx, first.ID)
		require.NoError(t, err)
		again, err := sb.CreateIntent(ctx, p)
		require.NoError(t, err)
		require.Equal(t, first, again)
		require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT count(*) FROM sandbox_payment_intents"))

		count, err := sb.RequestCount(ctx, first.ID, sandbox.OpCreate)
		require.NoError(t, err)
		require.Equal(t, sandbox.RequestCount{Requests: 2, Performed: 1, Replayed: 1}, count)
	})

	t.Run("KeyReusedForAnotherRequestIsRefused", func(t *testing.T) {
		t.Parallel()
		sb, _ := setupSandbox(t)
		ctx := t.Context()
		_, p := newOrder()
		_, err := sb.CreateIntent(ctx, p)
		require.NoError(t, err)

		other := p
		other.AmountMinor++
		_, err = sb.CreateIntent(ctx, other)
		requireCode(t, err, payments.CodeIdempotencyMismatch, false)

		_, a := createAuthorized(t, sb)
		_, c := createAuthorized(t, sb)
		_, err = sb.Capture(ctx, a.ID, "capture:shared")
		require.NoError(t, err)
		_, err = sb.Capture(ctx, c.ID, "capture:shared")
		requireCode(t, err, payments.CodeIdempotencyMismatch, false)
		_, err = sb.Cancel(ctx, a.ID, "capture:shared")
		requireCode(t, err, payments.CodeIdempotencyMismatch, false)

		got, err := sb.Get(ctx, c.ID)
		require.NoError(t, err)
		require.Equal(t, payments.StatusRequiresCapture, got.Status, "a refused request changes nothing")
	})

	t.Run("UnknownIntentIsResourceMissing", func(t *testing.T) {
		t.Parallel()
		sb, _ := setupSandbox(t)
		ctx := t.Context()
		_, err := sb.Get(ctx, "pi_doesnotexist")
		pe := requireCode(t, err, payments.CodeResourceMissing, false)
		require.Equal(t, http.StatusNotFound, pe.HTTPStatus)
		_, err = sb.Capture(ctx, "pi_doesnotexist", "capture:x")
		requireCode(t, err, payments.CodeResourceMissing, false)
		_, err = sb.Authorize(ctx, "pi_doesnotexist")
		requireCode(t, err, payments.CodeResourceMissing, false)
	})

	t.Run("InvalidParamsAreRefusedBeforeAnything", func(t *testing.T) {
		t.Parallel()
		sb, b := setupSandbox(t)
		ctx := t.Context()
		for name, mutate := range map[string]func(*payments.CreateIntentParams){
			"NoOrder":          func(p *payments.CreateIntentParams) { p.OrderID = uuid.Nil },
			"ZeroAmount":       func(p *payments.CreateIntentParams) { p.AmountMinor = 0 },
			"BadCurrency":      func(p *payments.CreateIntentParams) { p.Currency = "dollars" },
			"NoKey":            func(p *payments.CreateIntentParams) { p.IdempotencyKey = "" },
			"LongKey":          func(p *payments.CreateIntentParams) { p.IdempotencyKey = strings.Repeat("k", 256) },
			"ReservedMetadata": func(p *payments.CreateIntentParams) { p.Metadata = map[string]string{"order_id": "x"} },
			"LongMetadataKey":  func(p *payments.CreateIntentParams) { p.Metadata = map[string]string{strings.Repeat("k", 41): "x"} },
		} {
			_, p := newOrder()
			mutate(&p)
			_, err := sb.CreateIntent(ctx, p)
			require.Error(t, err, name)
			requireCode(t, err, payments.CodeInvalidRequest, false)
		}
		_, err := sb.Capture(ctx, "pi_x", "")
		requireCode(t, err, payments.CodeInvalidRequest, false)
		require.Equal(t, int64(0), dbtest.Count(t, b.pool, "SELECT count(*) FROM sandbox_requests"))
	})

	t.Run("WebhookRedeliveredUntil2xx", func(t *testing.T) {
		t.Parallel()
		sb, b := setupSandbox(t)
		ctx := t.Context()
		_, p := newOrder()
		in, err := sb.CreateIntent(ctx, p)
		require.NoError(t, err)

		b.recv.failNext(2)
		_, err = sb.Authorize(ctx, in.ID)
		require.NoError(t, err)
		events := b.recv.wait(t, in.ID, payments.EventAmountCapturableUpdated)

		attempts := b.recv.attempts(events[0].ID)
		require.Len(t, attempts, 3)
		require.Equal(t, []int{500, 500, 200}, []int{attempts[0].status, attempts[1].status, attempts[2].status})
		for _, a := range attempts[1:] {
			require.Equal(t, attempts[0].body, a.body, "every attempt sends the same bytes")
		}

		b.waitDelivered(t, events[0].ID)
		queued, err := sb.WebhookEvents(ctx, in.ID)
		require.NoError(t, err)
		require.Equal(t, []sandbox.WebhookEvent{{EventID: events[0].ID, Type: payments.EventAmountCapturableUpdated, Attempts: 3, Delivered: true}}, queued)
	})

	t.Run("SignedLikeStripe", func(t *testing.T) {
		t.Parallel()
		sb, b := setupSandbox(t)
		ctx := t.Context()
		_, p := newOrder()
		in, err := sb.CreateIntent(ctx, p)
		require.NoError(t, err)
		_, err = sb.Authorize(ctx, in.ID)
		require.NoError(t, err)
		events := b.recv.wait(t, in.ID, payments.EventAmountCapturableUpdated)
		a := b.recv.attempts(events[0].ID)[0]

		require.Regexp(t, `^t=\d+,v1=[0-9a-f]{64}$`, a.signature)
		ev, err := webhook.ConstructEvent(a.body, a.signature, webhookSecret)
		require.NoError(t, err)
		require.Equal(t, payments.EventAmountCapturableUpdated, string(ev.Type))
		require.Equal(t, "application/json; charset=utf-8", a.contentType)

		_, err = webhook.ConstructEvent(a.body, a.signature, "whsec_another_secret")
		require.ErrorIs(t, err, webhook.ErrNoValidSignature)
		tampered := bytes.Replace(a.body, []byte(`"amount":2500`), []byte(`"amount":1`), 1)
		require.NotEqual(t, a.body, tampered)
		_, err = webhook.ConstructEvent(tampered, a.signature, webhookSecret)
		require.ErrorIs(t, err, webhook.ErrNoValidSignature)

		// SignWebhook is the same scheme, for tests of the ingress.
		header := payments.SignWebhook(a.body, webhookSecret, time.Now())
		_, err = webhook.ConstructEvent(a.body, header, webhookSecret)
		require.NoError(t, err)
	})

	t.Run("StateIsSharedBetweenProcesses", func(t *testing.T) {
		t.Parallel()
		b := &sandboxBundle{pool: dbtest.New(t), recv: newWebhookReceiver(t, webhookSecret), logs: testkit.NewLog(t, testkit.Text())}
		b.cfg = sandbox.Config{
			WebhookURL: b.recv.srv.URL, WebhookSecret: webhookSecret,
			WebhookRetryMin: 10 * time.Millisecond, WebhookRetryMax: 50 * time.Millisecond, WebhookPollInterval: 20 * time.Millisecond,
			Logger: b.logs.Logger,
		}
		// The API and a worker: separate pools, separate Sandboxes.
		api := b.newSandbox(t, b.pool)
		workerPool, err := pgxpool.New(t.Context(), b.pool.Config().ConnString())
		require.NoError(t, err)
		t.Cleanup(workerPool.Close)
		worker := b.newSandbox(t, workerPool)
		ctx := t.Context()

		orderID, p := newOrder()
		in, err := worker.CreateIntent(ctx, p)
		require.NoError(t, err)
		_, err = api.Authorize(ctx, in.ID)
		require.NoError(t, err)
		_, err = worker.Capture(ctx, in.ID, "capture:"+orderID.String())
		require.NoError(t, err)
		// Nothing was sent while no sender ran; the queue kept the events.
		queued, err := api.WebhookEvents(ctx, in.ID)
		require.NoError(t, err)
		require.Len(t, queued, 2)
		require.False(t, queued[0].Delivered)

		// A sender in the API process delivers the worker's events too.
		startSender(t, api)
		b.recv.wait(t, in.ID, payments.EventAmountCapturableUpdated, payments.EventSucceeded)
	})

	t.Run("ListReturnsIntentsCreatedInTheWindow", func(t *testing.T) {
		t.Parallel()
		sb, _ := setupSandbox(t)
		ctx := t.Context()
		before := time.Now().Add(-time.Second)
		_, p1 := newOrder()
		a, err := sb.CreateIntent(ctx, p1)
		require.NoError(t, err)
		_, p2 := newOrder()
		c, err := sb.CreateIntent(ctx, p2)
		require.NoError(t, err)

		got, err := sb.List(ctx, before, time.Now().Add(2*time.Second))
		require.NoError(t, err)
		ids := make([]string, 0, len(got))
		for _, in := range got {
			ids = append(ids, in.ID)
		}
		require.ElementsMatch(t, []string{a.ID, c.ID}, ids)
		require.Equal(t, a.ClientSecret, got[indexOf(ids, a.ID)].ClientSecret)

		got, err = sb.List(ctx, before.Add(-time.Hour), before.Add(-time.Minute))
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("NeverLogsClientSecrets", func(t *testing.T) {
		t.Parallel()
		sb, b := setupSandbox(t)
		ctx := t.Context()
		var secrets []string
		var errs []error

		orderID, p := newOrder()
		in, err := sb.CreateIntent(ctx, p)
		require.NoError(t, err)
		secrets = append(secrets, in.ClientSecret)
		_, err = sb.CreateIntent(ctx, p) // a replay
		require.NoError(t, err)
		_, err = sb.Decline(ctx, in.ID)
		require.NoError(t, err)
		b.recv.failNext(1) // a failed delivery logs a warning
		_, err = sb.Authorize(ctx, in.ID)
		require.NoError(t, err)
		_, err = sb.Capture(ctx, in.ID, "capture:"+orderID.String())
		require.NoError(t, err)
		_, err = sb.Refund(ctx, in.ID, 0, "refund:"+orderID.String())
		require.NoError(t, err)
		_, err = sb.Refund(ctx, in.ID, 0, "refund:other")
		errs = append(errs, err)
		_, err = sb.Cancel(ctx, in.ID, "cancel:"+orderID.String())
		errs = append(errs, err)

		orderID2, c := createAuthorized(t, sb)
		secrets = append(secrets, c.ClientSecret)
		_, err = sb.Cancel(ctx, c.ID, "cancel:"+orderID2.String())
		require.NoError(t, err)
		_, err = sb.Capture(ctx, c.ID, "capture:"+orderID2.String())
		errs = append(errs, err)

		// A failed delivery is overtaken by later ones: order may vary.
		b.recv.waitUnordered(t, in.ID, payments.EventPaymentFailed, payments.EventAmountCapturableUpdated, payments.EventSucceeded, payments.EventChargeRefunded)
		b.recv.waitUnordered(t, c.ID, payments.EventAmountCapturableUpdated, payments.EventCanceled)

		logs := b.logs.String()
		require.Contains(t, logs, in.ID, "the sandbox logged its work")
		require.Contains(t, logs, "sandbox webhook delivery failed")
		b.logs.RequireNoSecrets(t, append([]string{"_secret_", webhookSecret}, secrets...)...)
		for _, err := range errs {
			require.Error(t, err)
			require.NotContains(t, err.Error(), "_secret_")
		}
		for _, d := range b.recv.all() {
			require.NotContains(t, string(d.body), "_secret_", "events carry no client secret")
		}
	})

	t.Run("ConfigValidate", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, sandbox.Config{}.Validate())
		require.Error(t, sandbox.Config{WebhookURL: "http://localhost/x"}.Validate(), "a URL needs a secret")
		require.Error(t, sandbox.Config{WebhookURL: "localhost/x", WebhookSecret: "s"}.Validate())
		require.Error(t, sandbox.Config{WebhookRetryMin: time.Minute, WebhookRetryMax: time.Second}.Validate())
		require.Error(t, sandbox.Config{WebhookTimeout: -1}.Validate())

		sb, err := sandbox.New(nil, sandbox.Config{})
		require.NoError(t, err)
		require.Error(t, sb.RunWebhookSender(t.Context()), "no URL to send to")
	})
}

func indexOf(ids []string, id string) int {
	for i, v := range ids {
		if v == id {
			return i
		}
	}
	return -1
}

// queuedTypes lists the types of the events the sandbox queued about an
// intent, oldest first.
func queuedTypes(t *testing.T, sb *sandbox.Sandbox, intentID string) []string {
	t.Helper()
	evs, err := sb.WebhookEvents(t.Context(), intentID)
	require.NoError(t, err)
	types := make([]string, 0, len(evs))
	for _, e := range evs {
		types = append(types, e.Type)
	}
	return types
}

// webhookReceiver stands in for the application's Stripe ingress: it
// verifies each request's signature with stripe-go, as the ingress does,
// and records every attempt.
type webhookReceiver struct {
	srv    *httptest.Server
	secret string
	// changed is signalled after every request.
	changed chan struct{}

	mu        sync.Mutex
	failCount int
	log       []attempt
}

type attempt struct {
	body        []byte
	signature   string
	contentType string
	status      int
	event       stripe.Event
	// badSignature is set when stripe-go refused the signature.
	badSignature error
}

func newWebhookReceiver(t *testing.T, secret string) *webhookReceiver {
	r := &webhookReceiver{secret: secret, changed: make(chan struct{}, 1)}
	r.srv = httptest.NewServer(r)
	t.Cleanup(r.srv.Close)
	return r
}

func (r *webhookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	a := attempt{body: body, signature: req.Header.Get("Stripe-Signature"), contentType: req.Header.Get("Content-Type"), status: http.StatusOK}
	a.event, a.badSignature = webhook.ConstructEvent(body, a.signature, r.secret)
	r.mu.Lock()
	switch {
	case a.badSignature != nil:
		a.status = http.StatusBadRequest
	case r.failCount > 0:
		r.failCount--
		a.status = http.StatusInternalServerError
	}
	r.log = append(r.log, a)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
	w.WriteHeader(a.status)
}

// failNext makes the next n requests fail with a 500.
func (r *webhookReceiver) failNext(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failCount = n
}

func (r *webhookReceiver) all() []attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]attempt(nil), r.log...)
}

// attempts returns the requests that carried event id, in order.
func (r *webhookReceiver) attempts(id string) []attempt {
	var out []attempt
	for _, a := range r.all() {
		if a.event.ID == id {
			out = append(out, a)
		}
	}
	return out
}

// accepted returns the distinct events about intentID that were answered
// 2xx, in the order of their first acceptance.
func (r *webhookReceiver) accepted(t *testing.T, intentID string) []stripe.Event {
	t.Helper()
	seen := map[string]bool{}
	var out []stripe.Event
	for _, a := range r.all() {
		require.NoError(t, a.badSignature, "the sandbox sent a webhook stripe-go refuses")
		if a.status != http.StatusOK || seen[a.event.ID] || eventIntent(t, a.event) != intentID {
			continue
		}
		seen[a.event.ID] = true
		out = append(out, a.event)
	}
	return out
}

// wait waits until the events accepted about intentID have exactly the
// types want, in order, and returns them.
func (r *webhookReceiver) wait(t *testing.T, intentID string, want ...string) []stripe.Event {
	t.Helper()
	return r.waitFor(t, intentID, true, want)
}

// waitUnordered is wait for events whose order may vary.
func (r *webhookReceiver) waitUnordered(t *testing.T, intentID string, want ...string) []stripe.Event {
	t.Helper()
	return r.waitFor(t, intentID, false, want)
}

func (r *webhookReceiver) waitFor(t *testing.T, intentID string, ordered bool, want []string) []stripe.Event {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		got := r.accepted(t, intentID)
		types := make([]string, 0, len(got))
		for _, ev := range got {
			types = append(types, string(ev.Type))
		}
		if len(types) >= len(want) {
			if ordered {
				require.Equal(t, want, types, "webhooks about %s", intentID)
			} else {
				require.ElementsMatch(t, want, types, "webhooks about %s", intentID)
			}
			return got
		}
		select {
		case <-r.changed:
		case <-deadline:
			require.FailNow(t, fmt.Sprintf("timed out waiting for webhooks %v about %s; got %v", want, intentID, types))
		}
	}
}

// eventIntent returns the PaymentIntent an event is about.
func eventIntent(t *testing.T, ev stripe.Event) string {
	t.Helper()
	if strings.HasPrefix(string(ev.Type), "charge.") {
		var ch stripe.Charge
		require.NoError(t, json.Unmarshal(ev.Data.Raw, &ch))
		require.NotNil(t, ch.PaymentIntent)
		return ch.PaymentIntent.ID
	}
	return ev.GetObjectValue("id")
}
