package sandbox_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/webhook"

	"boxoffice/domain/payments"
	"boxoffice/domain/payments/sandbox"
	"boxoffice/platform/db"
	"boxoffice/testkit/dbtest"
)

// overlapReceiver answers 200 to every webhook, but holds each request
// until at least `gate` are in flight at once (or 2 s pass, so a serial
// sender is not stuck), recording the most it ever saw at once and
// whether two events about one intent were ever in flight together.
type overlapReceiver struct {
	secret string
	gate   int

	mu          sync.Mutex
	inFlight    int
	maxInFlight int
	byIntent    map[string]int
	overlapped  []string
	order       map[string][]stripe.EventType
}

func (r *overlapReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	ev, err := webhook.ConstructEvent(body, req.Header.Get("Stripe-Signature"), r.secret)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	var pi stripe.PaymentIntent
	if err := json.Unmarshal(ev.Data.Raw, &pi); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.inFlight++
	r.maxInFlight = max(r.maxInFlight, r.inFlight)
	r.byIntent[pi.ID]++
	if r.byIntent[pi.ID] > 1 {
		r.overlapped = append(r.overlapped, pi.ID)
	}
	r.order[pi.ID] = append(r.order[pi.ID], ev.Type)
	deadline := time.Now().Add(2 * time.Second)
	for r.inFlight < r.gate && time.Now().Before(deadline) {
		r.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		r.mu.Lock()
	}
	r.inFlight--
	r.byIntent[pi.ID]--
	r.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// TestWebhookSenderSendsIntentsInParallel: a slow receiver must not make
// the sandbox's webhooks a queue of one (an onsale's authorizations would
// wait behind each other until their holds expired), yet one intent's
// events still arrive one at a time, oldest first.
func TestWebhookSenderSendsIntentsInParallel(t *testing.T) {
	t.Parallel()
	const intents = 12
	recv := &overlapReceiver{secret: webhookSecret, gate: 8, byIntent: map[string]int{}, order: map[string][]stripe.EventType{}}
	srv := httptest.NewServer(recv)
	t.Cleanup(srv.Close)

	sb, err := sandbox.New(dbtest.New(t), sandbox.Config{
		WebhookURL:          srv.URL + "/v1/webhooks/stripe",
		WebhookSecret:       webhookSecret,
		WebhookPollInterval: 20 * time.Millisecond,
		WebhookConcurrency:  8,
		WebhookBatchSize:    64,
	})
	require.NoError(t, err)

	// Queue every event before the sender starts, so one claim takes them.
	ctx := t.Context()
	var ids []string
	for range intents {
		orderID, in := createAuthorized(t, sb)
		_, err := sb.Capture(ctx, in.ID, "capture:"+orderID.String())
		require.NoError(t, err)
		ids = append(ids, in.ID)
	}
	startSender(t, sb)

	require.Eventually(t, func() bool {
		recv.mu.Lock()
		defer recv.mu.Unlock()
		for _, id := range ids {
			if len(recv.order[id]) < 2 {
				return false
			}
		}
		return true
	}, waitTimeout, 20*time.Millisecond)

	recv.mu.Lock()
	defer recv.mu.Unlock()
	require.GreaterOrEqual(t, recv.maxInFlight, recv.gate, "deliveries of different intents were not in flight together")
	require.Empty(t, recv.overlapped, "two events about one intent were in flight at once")
	for _, id := range ids {
		require.Equal(t, []stripe.EventType{payments.EventAmountCapturableUpdated, payments.EventSucceeded}, recv.order[id], "events about %s", id)
	}
}

// TestWebhookSenderSettlesABatchInOneTransaction: however many events a
// claim leases, the sender spends one transaction claiming them and one
// recording how every attempt went — delivered, or due again after its
// backoff with its error — not one per event.
func TestWebhookSenderSettlesABatchInOneTransaction(t *testing.T) {
	t.Parallel()
	const intents, failing = 6, 2
	pool, costs := dbtest.NewTraced(t)

	// Events are queued by another Sandbox on the same database, so the
	// sender's own is not woken: its first claim takes them all, and it
	// claims nothing more within the test.
	queue, err := sandbox.New(pool, sandbox.Config{})
	require.NoError(t, err)
	refused := map[string]bool{}
	for i := range intents {
		_, in := createAuthorized(t, queue)
		if i < failing {
			refused[in.ID] = true
		}
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		ev, err := webhook.ConstructEvent(body, req.Header.Get("Stripe-Signature"), webhookSecret)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var pi stripe.PaymentIntent
		if err := json.Unmarshal(ev.Data.Raw, &pi); err != nil || refused[pi.ID] {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	sb, err := sandbox.New(pool, sandbox.Config{
		WebhookURL:          srv.URL + "/v1/webhooks/stripe",
		WebhookSecret:       webhookSecret,
		WebhookPollInterval: time.Hour,
		WebhookRetryMin:     time.Hour,
		WebhookRetryMax:     time.Hour,
		WebhookBatchSize:    64,
	})
	require.NoError(t, err)
	attempted := make(chan bool, intents)
	sandbox.SetAttemptedFunc(sb, func(_ string, delivered bool) { attempted <- delivered })

	senderCtx, stop := context.WithCancel(db.WithRole(context.Background(), "sandbox_webhooks"))
	done := make(chan error, 1)
	go func() { done <- sb.RunWebhookSender(senderCtx) }()
	t.Cleanup(func() { stop(); <-done })

	delivered := 0
	for range intents {
		select {
		case ok := <-attempted:
			if ok {
				delivered++
			}
		case <-time.After(waitTimeout):
			t.Fatal("the sender did not attempt every event")
		}
	}
	require.Equal(t, intents-failing, delivered)

	var sender db.Cost
	for _, c := range costs.Costs() {
		if c.Role == "sandbox_webhooks" {
			sender = c.Cost
			sender.StatementTime = 0 // the clock's, not a count
		}
	}
	// Round trips: BEGIN travels with each transaction's first statement.
	require.Equal(t, db.Cost{Transactions: 2, WriteTransactions: 2, Statements: 3, RowsWritten: 2 * intents, RoundTrips: 4}, sender,
		"one claim, one settle of %d events", intents)
	require.EqualValues(t, intents-failing, dbtest.Count(t, pool,
		"SELECT count(*) FROM sandbox_webhook_deliveries WHERE delivered_at IS NOT NULL AND last_error IS NULL"))
	require.EqualValues(t, failing, dbtest.Count(t, pool,
		`SELECT count(*) FROM sandbox_webhook_deliveries
		 WHERE delivered_at IS NULL AND last_error = 'status 500' AND next_attempt_at > now() + interval '30 minutes'`))
}
