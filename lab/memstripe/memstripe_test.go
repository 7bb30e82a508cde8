package memstripe_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v79"

	"boxoffice/domain/payments"
	"boxoffice/lab/memstripe"
)

// The product's real Stripe client drives the stand-in through a whole
// payment; the buyer confirms with the client secret; the webhooks arrive
// in order and verify as Stripe's do.
func TestStandInSpeaksStripe(t *testing.T) {
	t.Parallel()
	const secret = "whsec_test_standin"
	got, ingressURL := verifyingIngress(t, secret)
	ctx, srv, stripe := startStandIn(t, memstripe.Config{WebhookURL: ingressURL, WebhookSecret: secret})
	order := uuid.New()
	in, err := stripe.CreateIntent(ctx, payments.CreateIntentParams{OrderID: order, AmountMinor: 5000, Currency: "EUR", IdempotencyKey: "authorize:1"})
	require.NoError(t, err)
	require.Equal(t, payments.StatusRequiresPaymentMethod, in.Status)
	require.NotEmpty(t, in.ClientSecret)
	again, err := stripe.CreateIntent(ctx, payments.CreateIntentParams{OrderID: order, AmountMinor: 5000, Currency: "EUR", IdempotencyKey: "authorize:1"})
	require.NoError(t, err)
	require.Equal(t, in.ID, again.ID, "the same idempotency key answers the first response")

	require.Error(t, memstripe.Confirm(ctx, srv.Client(), srv.URL, in.ID, "pi_wrong_secret", memstripe.CardApproved))
	require.NoError(t, memstripe.Confirm(ctx, srv.Client(), srv.URL, in.ID, in.ClientSecret, memstripe.CardApproved))
	captured, err := stripe.Capture(ctx, in.ID, "capture:1")
	require.NoError(t, err)
	require.Equal(t, payments.StatusSucceeded, captured.Status)
	require.Equal(t, int64(5000), captured.AmountReceived)
	read, err := stripe.Get(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, order.String(), read.Metadata["order_id"])

	require.Equal(t, payments.EventAmountCapturableUpdated, string((<-got).Type))
	require.Equal(t, payments.EventSucceeded, string((<-got).Type))

	_, err = stripe.Capture(ctx, in.ID, "capture:2")
	require.Error(t, err, "a captured intent cannot be captured again")
	unauthorized, err := payments.NewStripe(payments.StripeConfig{SecretKey: "sk_test_other", APIBase: srv.URL})
	require.NoError(t, err)
	_, err = unauthorized.Get(ctx, in.ID)
	require.Error(t, err)
}

// A declined card answers 402 card_declined, as Stripe does, sends
// payment_intent.payment_failed with the intent's last_payment_error, and
// leaves the intent awaiting a card: the same buyer confirms again with
// another card, and a canceled intent refuses a card at all.
func TestStandInDeclinesTheDeclinedTestCard(t *testing.T) {
	t.Parallel()
	const secret = "whsec_test_standin"
	got, ingressURL := verifyingIngress(t, secret)
	ctx, srv, provider := startStandIn(t, memstripe.Config{WebhookURL: ingressURL, WebhookSecret: secret})
	in, err := provider.CreateIntent(ctx, payments.CreateIntentParams{OrderID: uuid.New(), AmountMinor: 5000, Currency: "EUR", IdempotencyKey: "authorize:1"})
	require.NoError(t, err)

	err = memstripe.Confirm(ctx, srv.Client(), srv.URL, in.ID, in.ClientSecret, memstripe.CardDeclined)
	var declined *memstripe.ConfirmError
	require.ErrorAs(t, err, &declined)
	require.Equal(t, http.StatusPaymentRequired, declined.Status)
	require.Equal(t, payments.CodeCardDeclined, declined.Code)
	ev := <-got
	require.Equal(t, payments.EventPaymentFailed, string(ev.Type))
	var object struct {
		Status           string `json:"status"`
		LastPaymentError struct {
			Code string `json:"code"`
		} `json:"last_payment_error"`
	}
	require.NoError(t, json.Unmarshal(ev.Data.Raw, &object))
	require.Equal(t, string(payments.StatusRequiresPaymentMethod), object.Status)
	require.Equal(t, payments.CodeCardDeclined, object.LastPaymentError.Code)
	read, err := provider.Get(ctx, in.ID)
	require.NoError(t, err)
	require.Equal(t, payments.StatusRequiresPaymentMethod, read.Status)
	require.NotNil(t, read.LastPaymentError)

	require.NoError(t, memstripe.Confirm(ctx, srv.Client(), srv.URL, in.ID, in.ClientSecret, memstripe.CardApproved), "another card after a decline")
	require.Equal(t, payments.EventAmountCapturableUpdated, string((<-got).Type))

	other, err := provider.CreateIntent(ctx, payments.CreateIntentParams{OrderID: uuid.New(), AmountMinor: 5000, Currency: "EUR", IdempotencyKey: "authorize:2"})
	require.NoError(t, err)
	_, err = provider.Cancel(ctx, other.ID, "cancel:2")
	require.NoError(t, err)
	err = memstripe.Confirm(ctx, srv.Client(), srv.URL, other.ID, other.ClientSecret, memstripe.CardApproved)
	var gone *memstripe.ConfirmError
	require.ErrorAs(t, err, &gone)
	require.Equal(t, http.StatusBadRequest, gone.Status)
	require.Equal(t, "payment_intent_unexpected_state", gone.Code)
}

// A sender's webhooks go over one connection, as Stripe keeps its webhook
// connections open, also when the endpoint answers with a body: the
// product would otherwise accept (and the bench count) a connection per
// webhook.
func TestStandInKeepsItsWebhookConnection(t *testing.T) {
	t.Parallel()
	const secret = "whsec_test_standin"
	got := make(chan struct{}, 10)
	var conns atomic.Int32
	ingress := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"received":true}`)
		got <- struct{}{}
	}))
	ingress.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	ingress.Start()
	t.Cleanup(ingress.Close)
	ctx, srv, stripe := startStandIn(t, memstripe.Config{WebhookURL: ingress.URL, WebhookSecret: secret, Senders: 1})
	const webhooks = 4
	for i := range webhooks {
		in, err := stripe.CreateIntent(ctx, payments.CreateIntentParams{OrderID: uuid.New(), AmountMinor: 5000, Currency: "EUR", IdempotencyKey: "authorize:" + strconv.Itoa(i)})
		require.NoError(t, err)
		require.NoError(t, memstripe.Confirm(ctx, srv.Client(), srv.URL, in.ID, in.ClientSecret, memstripe.CardApproved))
		<-got
	}
	require.Equal(t, int32(1), conns.Load(), "%d webhooks, one sender", webhooks)
}

// verifyingIngress is a webhook endpoint that verifies each delivery
// with the product's Stripe ingress (secret) and passes its event on, in
// the order received; a delivery that does not verify is answered 400.
func verifyingIngress(t *testing.T, secret string) (<-chan stripe.Event, string) {
	t.Helper()
	verifier := payments.NewIngress(nil, payments.IngressConfig{WebhookSecret: secret, Logger: slog.New(slog.DiscardHandler)})
	got := make(chan stripe.Event, 10)
	ingress := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ev, err := verifier.Verify(body, r.Header.Get("Stripe-Signature"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got <- ev
	}))
	t.Cleanup(ingress.Close)
	return got, ingress.URL
}

// startStandIn runs a stand-in configured by cfg (its secret key set here)
// until the test ends, and returns the context it runs under, its server
// and the product's Stripe client pointed at it.
func startStandIn(t *testing.T, cfg memstripe.Config) (context.Context, *httptest.Server, *payments.Stripe) {
	t.Helper()
	cfg.SecretKey = "sk_test_standin"
	s := memstripe.New(cfg)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go s.Run(ctx)
	stripe, err := payments.NewStripe(payments.StripeConfig{SecretKey: cfg.SecretKey, APIBase: srv.URL})
	require.NoError(t, err)
	return ctx, srv, stripe
}
