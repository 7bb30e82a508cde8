package handlers_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/catalog"
	"boxoffice/domain/cells"
	"boxoffice/domain/payments"
	"boxoffice/domain/payments/sandbox"
	"boxoffice/domain/purchase"
	"boxoffice/handlers"
	"boxoffice/platform/auth"
	"boxoffice/platform/outbox"
	"boxoffice/sqlcgen"
	"boxoffice/testkit/dbtest"
)

// sandboxBundle is a second server on the test bundle's database, built
// with the sandbox provider, whose webhook sender delivers to that same
// server's Stripe ingress, as `serve` does with BOXOFFICE_PAYMENTS=sandbox.
type sandboxBundle struct {
	*testBundle // the server without a sandbox: creates events and holds
	api         *testBundle
	sandbox     *sandbox.Sandbox
}

func setupSandbox(t *testing.T) *sandboxBundle {
	t.Helper()
	b := setup(t)
	logger := slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	sb, err := sandbox.New(b.pool, sandbox.Config{
		WebhookURL: srv.URL + "/v1/webhooks/stripe", WebhookSecret: webhookSecret,
		WebhookRetryMin: 10 * time.Millisecond, WebhookRetryMax: 100 * time.Millisecond, Logger: logger,
	})
	require.NoError(t, err)
	cat := catalog.New(b.pool)
	h := handlers.New(handlers.Config{
		Cells: cells.Single(&cells.Cell{
			Name:     cells.Default,
			Catalog:  cat,
			Purchase: purchase.NewService(b.pool, logger, purchase.Config{}),
			Room:     fixedRoom(b.signer, cat, logger),
			Ingress:  payments.NewIngress(b.pool, payments.IngressConfig{WebhookSecret: webhookSecret, Logger: logger, Provider: sb}),
			Sandbox:  sb,
		}),
		Logger:    logger,
		Bearer:    auth.NewVerifier(jwtSecret),
		Admission: b.signer,
	})
	mux.Handle("/", validating(t, h.Handler()))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sb.RunWebhookSender(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return &sandboxBundle{
		testBundle: b,
		api:        &testBundle{pool: b.pool, srv: srv, logs: b.logs, signer: b.signer},
		sandbox:    sb,
	}
}

// pendingOrder holds a seat for a new buyer and creates the order's
// intent at the sandbox with its payments row, as the payments consumer
// does. It returns the buyer's token, the order id and the intent.
func (b *sandboxBundle) pendingOrder(t *testing.T, ev event, seat string) (string, uuid.UUID, payments.Intent) {
	t.Helper()
	_, tok := b.buyer(t)
	held := b.hold(t, tok, b.admit(t, tok, ev.ID), ev.ID, uuid.NewString(), seat)
	require.Equal(t, http.StatusAccepted, held.status, "%s", held.body)
	orderID := uuid.MustParse(held.json(t)["orderId"].(string))
	ctx := context.Background()
	in, err := b.sandbox.CreateIntent(ctx, payments.CreateIntentParams{
		OrderID: orderID, AmountMinor: 5000, Currency: "eur", IdempotencyKey: "authorize:" + uuid.NewString(),
	})
	require.NoError(t, err)
	b.remember(in.ClientSecret)
	n, err := sqlcgen.New().PaymentUpsertIntent(ctx, b.pool, sqlcgen.PaymentUpsertIntentParams{
		OrderID: orderID, Provider: "sandbox", PaymentIntentID: in.ID, ClientSecret: in.ClientSecret,
		Status: string(in.Status), AmountMinor: in.AmountMinor, Currency: in.Currency,
	})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	return tok, orderID, in
}

// waitWebhook waits until the sandbox's webhook of type about the intent
// was delivered to the ingress and stored, and returns the domain events
// of domainType it wrote for the order.
func (b *sandboxBundle) waitWebhook(t *testing.T, intentID, typ string, orderID uuid.UUID, domainType string) int64 {
	t.Helper()
	require.Eventually(t, func() bool {
		evs, err := b.sandbox.WebhookEvents(context.Background(), intentID)
		if err != nil {
			return false
		}
		for _, e := range evs {
			if e.Type == typ && e.Delivered {
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM stripe_events WHERE type = $1", typ))
	return dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE event_type = $1 AND aggregate_id = $2", domainType, orderID)
}

func TestSandboxRoutes(t *testing.T) {
	t.Parallel()
	b := setupSandbox(t)
	ev := b.createEvent(t, b.organizer(t))

	t.Run("OwnerAuthorizesAndTheWebhookReachesTheIngress", func(t *testing.T) {
		t.Parallel()
		tok, orderID, in := b.pendingOrder(t, ev, ev.Seats[0])
		path := "/v1/sandbox/payment-intents/" + in.ID + "/authorize"
		res := b.api.do(t, http.MethodPost, path, bearer(tok), nil)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		require.Equal(t, map[string]any{"paymentIntentId": in.ID, "orderId": orderID.String(), "status": "requires_capture"}, res.json(t))

		require.EqualValues(t, 1, b.waitWebhook(t, in.ID, payments.EventAmountCapturableUpdated, orderID, outbox.TypePaymentAuthorized),
			"the signed webhook was verified and became PaymentAuthorized")
		n, err := b.sandbox.RequestCount(context.Background(), in.ID, sandbox.OpAuthorize)
		require.NoError(t, err)
		require.Equal(t, sandbox.RequestCount{Requests: 1, Performed: 1}, n)

		again := b.api.do(t, http.MethodPost, path, bearer(tok), nil)
		require.Equal(t, http.StatusConflict, again.status, "%s", again.body)
		require.Equal(t, handlers.TypeConflict, problemType(t, again))
	})

	t.Run("OwnerDeclinesAndTheWebhookFailsThePayment", func(t *testing.T) {
		t.Parallel()
		tok, orderID, in := b.pendingOrder(t, ev, ev.Seats[1])
		res := b.api.do(t, http.MethodPost, "/v1/sandbox/payment-intents/"+in.ID+"/decline", bearer(tok), nil)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		require.Equal(t, "requires_payment_method", res.json(t)["status"])
		require.EqualValues(t, 1, b.waitWebhook(t, in.ID, payments.EventPaymentFailed, orderID, outbox.TypePaymentFailed))
	})

	t.Run("AnyoneButTheOwnerGets404", func(t *testing.T) {
		t.Parallel()
		_, _, in := b.pendingOrder(t, ev, ev.Seats[2])
		_, stranger := b.buyer(t)
		for _, action := range []string{"authorize", "decline"} {
			res := b.api.do(t, http.MethodPost, "/v1/sandbox/payment-intents/"+in.ID+"/"+action, bearer(stranger), nil)
			require.Equal(t, http.StatusNotFound, res.status, "%s", res.body)
			require.Equal(t, handlers.TypeNotFound, problemType(t, res))
		}
		unknown := b.api.do(t, http.MethodPost, "/v1/sandbox/payment-intents/pi_unknown/authorize", bearer(stranger), nil)
		require.Equal(t, http.StatusNotFound, unknown.status)
		require.Equal(t, handlers.TypeNotFound, problemType(t, unknown))
		require.Equal(t, http.StatusUnauthorized,
			b.api.do(t, http.MethodPost, "/v1/sandbox/payment-intents/"+in.ID+"/authorize", nil, nil).status)
		require.Equal(t, http.StatusForbidden,
			b.api.do(t, http.MethodPost, "/v1/sandbox/payment-intents/"+in.ID+"/authorize", bearer(b.organizer(t)), nil).status)

		n, err := b.sandbox.RequestCount(context.Background(), in.ID, sandbox.OpAuthorize)
		require.NoError(t, err)
		require.Zero(t, n.Requests, "the sandbox was never asked")
		got, err := b.sandbox.Get(context.Background(), in.ID)
		require.NoError(t, err)
		require.Equal(t, payments.StatusRequiresPaymentMethod, got.Status)
	})

	t.Run("DocumentedAsSandboxOnly", func(t *testing.T) {
		t.Parallel()
		paths := b.api.do(t, http.MethodGet, "/openapi.json", nil, nil).json(t)["paths"].(map[string]any)
		for _, action := range []string{"authorize", "decline"} {
			op := paths["/v1/sandbox/payment-intents/{id}/"+action].(map[string]any)["post"].(map[string]any)
			require.Contains(t, op["description"], "BOXOFFICE_PAYMENTS=sandbox")
			require.Contains(t, op["description"], "buyer confirming the payment")
		}
	})
}

// TestStripeWebhookDisagreeingWithTheOrder checks that the ingress
// re-reads the PaymentIntent from the provider when a webhook contradicts
// the order, and acts on what the provider says now.
func TestStripeWebhookDisagreeingWithTheOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// setup gives each case its own database: waitWebhook counts provider
	// events by type.
	setup := func(t *testing.T) (*sandboxBundle, event) {
		b := setupSandbox(t)
		return b, b.createEvent(t, b.organizer(t))
	}
	// confirmed authorizes the order's intent at the sandbox, waits for its
	// webhook, and moves the order on as the saga would.
	confirmed := func(t *testing.T, b *sandboxBundle, ev event) (uuid.UUID, payments.Intent) {
		_, orderID, in := b.pendingOrder(t, ev, ev.Seats[0])
		_, err := b.sandbox.Authorize(ctx, in.ID)
		require.NoError(t, err)
		require.EqualValues(t, 1, b.waitWebhook(t, in.ID, payments.EventAmountCapturableUpdated, orderID, outbox.TypePaymentAuthorized))
		dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'capture_pending' WHERE id = $1", orderID)
		return orderID, in
	}
	count := func(b *sandboxBundle, orderID uuid.UUID, typ string) int64 {
		return dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE aggregate_id = $1 AND event_type = $2", orderID, typ)
	}

	t.Run("AStaleDeclineDoesNotFailAnAuthorizedOrder", func(t *testing.T) {
		t.Parallel()
		b, ev := setup(t)
		orderID, in := confirmed(t, b, ev)
		// A decline of an earlier attempt, delivered after the authorization.
		body, _ := json.Marshal(map[string]any{
			"id": "evt_stale_decline", "object": "event", "type": payments.EventPaymentFailed, "created": time.Now().Unix(),
			"api_version": "2024-06-20",
			"data": map[string]any{"object": map[string]any{
				"id": in.ID, "object": "payment_intent", "amount": 5000, "currency": "eur", "status": "requires_payment_method",
				"last_payment_error": map[string]any{"type": "card_error", "code": "card_declined"},
				"metadata":           map[string]string{"order_id": orderID.String()},
			}},
		})
		res := b.api.stripeWebhook(t, body, webhookSecret)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		require.Zero(t, count(b, orderID, outbox.TypePaymentFailed), "the stale decline must not become PaymentFailed")
		require.EqualValues(t, 2, count(b, orderID, outbox.TypePaymentAuthorized), "the provider says requires_capture: acted on as an authorization (a duplicate for the saga)")
		require.Contains(t, b.logs.String(), "provider event disagrees with the order")
	})

	t.Run("ACancelOfAConfirmedOrderIsConfirmedByTheProvider", func(t *testing.T) {
		t.Parallel()
		b, ev := setup(t)
		orderID, in := confirmed(t, b, ev)
		_, err := b.sandbox.Cancel(ctx, in.ID, "cancel:"+orderID.String())
		require.NoError(t, err)
		require.EqualValues(t, 1, b.waitWebhook(t, in.ID, payments.EventCanceled, orderID, outbox.TypeAuthorizationCanceled))
	})

	t.Run("AnEventThatAgreesIsTakenAsItIs", func(t *testing.T) {
		t.Parallel()
		b, ev := setup(t)
		_, orderID, in := b.pendingOrder(t, ev, ev.Seats[0])
		before := strings.Count(b.logs.String(), "provider event disagrees with the order")
		_, err := b.sandbox.Decline(ctx, in.ID)
		require.NoError(t, err)
		require.EqualValues(t, 1, b.waitWebhook(t, in.ID, payments.EventPaymentFailed, orderID, outbox.TypePaymentFailed))
		require.Equal(t, before, strings.Count(b.logs.String(), "provider event disagrees with the order"))
	})
}

func TestSandboxRoutesExistOnlyWithTheSandbox(t *testing.T) {
	t.Parallel()
	b := setup(t) // no Sandbox in its Config
	_, tok := b.buyer(t)
	for _, action := range []string{"authorize", "decline"} {
		res := b.do(t, http.MethodPost, "/v1/sandbox/payment-intents/pi_123/"+action, bearer(tok), nil)
		require.Equal(t, http.StatusNotFound, res.status, "%s", res.body)
	}
	paths := b.do(t, http.MethodGet, "/openapi.json", nil, nil).json(t)["paths"].(map[string]any)
	for p := range paths {
		require.NotContains(t, p, "/v1/sandbox/")
	}
}
