package handlers_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/domain/payments"
	"boxoffice/handlers"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
)

// stripeEvent is a Stripe-format event about one PaymentIntent of orderID.
func stripeEvent(id, typ, orderID string) []byte {
	raw, _ := json.Marshal(map[string]any{
		"id": id, "object": "event", "type": typ, "created": time.Now().Unix(),
		"api_version": "2024-06-20", "livemode": false,
		"data": map[string]any{"object": map[string]any{
			"id": "pi_test_" + orderID[:8], "object": "payment_intent", "amount": 10000, "currency": "eur",
			"amount_capturable": 10000, "amount_received": 0, "status": "requires_capture",
			"metadata": map[string]string{"order_id": orderID},
		}},
	})
	return raw
}

func (b *testBundle) stripeWebhook(t *testing.T, body []byte, secret string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/webhooks/stripe", map[string]string{
		"Stripe-Signature": payments.SignWebhook(body, secret, time.Now()),
	}, body)
}

func TestStripeWebhook(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := b.createEvent(t, b.organizer(t))
	_, tok := b.buyer(t)
	held := b.hold(t, tok, b.admit(t, tok, ev.ID), ev.ID, "k", ev.Seats[0])
	require.Equal(t, http.StatusAccepted, held.status)
	orderID := held.json(t)["orderId"].(string)

	t.Run("BadSignatureWritesNothing", func(t *testing.T) {
		before := rowCounts(t, b.pool)
		body := stripeEvent("evt_forged", "payment_intent.amount_capturable_updated", orderID)
		for _, headers := range []map[string]string{
			{"Stripe-Signature": payments.SignWebhook(body, "whsec_someone_else_0123456789", time.Now())},
			{"Stripe-Signature": payments.SignWebhook(body, webhookSecret, time.Now().Add(-time.Hour))}, // replayed
			{"Stripe-Signature": "t=1,v1=00"},
			{},
		} {
			res := b.do(t, http.MethodPost, "/v1/webhooks/stripe", headers, body)
			require.Equal(t, http.StatusBadRequest, res.status, "%s", res.body)
			require.Equal(t, handlers.TypeMalformed, problemType(t, res))
		}
		require.Equal(t, before, rowCounts(t, b.pool))
		require.EqualValues(t, 0, dbtest.Count(t, b.pool, "SELECT count(*) FROM stripe_events"))
	})

	t.Run("SameEventTenTimesHasOneEffect", func(t *testing.T) {
		body := stripeEvent("evt_auth_1", "payment_intent.amount_capturable_updated", orderID)
		var wg sync.WaitGroup
		statuses := make([]int, 10)
		for i := range statuses {
			wg.Go(func() { statuses[i] = b.stripeWebhook(t, body, webhookSecret).status })
		}
		wg.Wait()
		for _, s := range statuses {
			require.Equal(t, http.StatusOK, s)
		}
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM stripe_events WHERE id = 'evt_auth_1'"))
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE event_type = $1", outbox.TypePaymentAuthorized))

		var raw []byte
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT envelope FROM outbox WHERE event_type = $1", outbox.TypePaymentAuthorized).Scan(&raw))
		var env outbox.Envelope
		require.NoError(t, json.Unmarshal(raw, &env))
		require.Equal(t, orderID, env.AggregateID.String())
		require.Equal(t, "stripe:evt_auth_1", env.CausationID)
		require.Equal(t, held.header.Get("X-Correlation-Id"), env.CorrelationID, "the buyer journey's correlation id follows the order")
		var p outbox.PaymentAuthorized
		require.NoError(t, json.Unmarshal(env.Payload, &p))
		require.Equal(t, outbox.PaymentAuthorized{OrderID: env.AggregateID, PaymentIntentID: "pi_test_" + orderID[:8],
			AmountCapturable: 10000, ProviderEventID: "evt_auth_1"}, p)
	})

	t.Run("MapsEachPaymentIntentEvent", func(t *testing.T) {
		for i, tc := range []struct{ stripeType, domain string }{
			{"payment_intent.succeeded", outbox.TypePaymentCaptured},
			{"payment_intent.payment_failed", outbox.TypePaymentFailed},
			{"payment_intent.canceled", outbox.TypeAuthorizationCanceled},
		} {
			res := b.stripeWebhook(t, stripeEvent(fmt.Sprintf("evt_map_%d", i), tc.stripeType, orderID), webhookSecret)
			require.Equal(t, http.StatusOK, res.status, "%s", res.body)
			require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE event_type = $1", tc.domain), tc.stripeType)
		}
	})

	t.Run("UnknownTypesAndStrangersAreRecordedAndIgnored", func(t *testing.T) {
		before := dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox")
		require.Equal(t, http.StatusOK, b.stripeWebhook(t, stripeEvent("evt_other", "customer.created", orderID), webhookSecret).status)
		stranger := "00000000-0000-4000-8000-000000000000"
		require.Equal(t, http.StatusOK, b.stripeWebhook(t, stripeEvent("evt_stranger", "payment_intent.succeeded", stranger), webhookSecret).status)
		require.Equal(t, before, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox"))
		require.EqualValues(t, 2, dbtest.Count(t, b.pool, "SELECT count(*) FROM stripe_events WHERE id IN ('evt_other', 'evt_stranger')"))
	})
}

func TestStripeWebhookWithoutSecretIs404(t *testing.T) {
	t.Parallel()
	h := handlers.New(handlers.Config{Cells: noCells(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/webhooks/stripe", strings.NewReader(`{}`))
	req.Header.Set("Stripe-Signature", "t=1,v1=00")
	req.Header.Set("Content-Type", "application/json")
	h.Handler().ServeHTTP(rec, req)
	require.Equal(t, http.StatusNotFound, rec.Code, rec.Body.String())
}

// rawStripeEvent is a Stripe-format event whose object is given whole.
func rawStripeEvent(id, typ string, object map[string]any) []byte {
	raw, _ := json.Marshal(map[string]any{
		"id": id, "object": "event", "type": typ, "created": time.Now().Unix(),
		"api_version": "2024-06-20", "livemode": false, "data": map[string]any{"object": object},
	})
	return raw
}

// A validly signed event whose ids are not Stripe ids (a NUL, which
// PostgreSQL refuses, or any other unexpected character, a wrong prefix,
// an empty or overlong id) is a 400 problem and writes nothing, like a
// bad signature.
func TestStripeWebhookRefusesSignedEventsWithBadIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := b.createEvent(t, b.organizer(t))
	_, tok := b.buyer(t)
	held := b.hold(t, tok, b.admit(t, tok, ev.ID), ev.ID, "k", ev.Seats[0])
	require.Equal(t, http.StatusAccepted, held.status)
	orderID := held.json(t)["orderId"].(string)
	intent := func(id string, metadata map[string]string) map[string]any {
		return map[string]any{
			"id": id, "object": "payment_intent", "amount": 10000, "currency": "eur", "amount_capturable": 10000,
			"status": "requires_capture", "metadata": metadata,
		}
	}
	ours := map[string]string{"order_id": orderID}
	failed := intent("pi_test_declined", ours)
	failed["status"] = "requires_payment_method"
	failed["last_payment_error"] = map[string]any{"type": "card_error", "code": "card_declined", "decline_code": "insufficient\x00funds"}

	for _, tc := range []struct {
		name string
		body []byte
	}{
		{"NULInEventID", rawStripeEvent("evt_\x00", "payment_intent.amount_capturable_updated", intent("pi_test_1", ours))},
		{"SpaceInEventID", rawStripeEvent("evt_a b", "payment_intent.amount_capturable_updated", intent("pi_test_1", ours))},
		{"NonASCIIEventID", rawStripeEvent("evt_é", "customer.created", map[string]any{"id": "cus_1"})},
		{"EventIDWithoutPrefix", rawStripeEvent("abc123", "customer.created", map[string]any{"id": "cus_1"})},
		{"EmptyEventID", rawStripeEvent("", "customer.created", map[string]any{"id": "cus_1"})},
		{"OverlongEventID", rawStripeEvent("evt_"+strings.Repeat("a", 300), "customer.created", map[string]any{"id": "cus_1"})},
		{"NULInEventType", rawStripeEvent("evt_type_nul", "payment_intent.succeeded\x00", intent("pi_test_1", ours))},
		{"NULInIntentIDOfAnOrder", rawStripeEvent("evt_pi_nul", "payment_intent.succeeded", intent("pi_\x00", ours))},
		{"NULInIntentIDWithoutMetadata", rawStripeEvent("evt_pi_nul_2", "payment_intent.succeeded", intent("pi_\x00", nil))},
		{"IntentIDWithoutPrefix", rawStripeEvent("evt_pi_prefix", "payment_intent.canceled", intent("ch_123", nil))},
		{"NULInDeclineCode", rawStripeEvent("evt_decline_nul", "payment_intent.payment_failed", failed)},
		{"NULInRefundedChargesIntent", rawStripeEvent("evt_charge_nul", "charge.refunded", map[string]any{
			"id": "ch_1", "object": "charge", "amount_refunded": 100, "payment_intent": "pi_\x00", "metadata": ours,
		})},
		{"NULInRefundsIntent", rawStripeEvent("evt_refund_nul", "refund.updated", map[string]any{
			"id": "re_1", "object": "refund", "amount": 100, "status": "succeeded", "payment_intent": "pi_\x00",
		})},
	} {
		before := rowCounts(t, b.pool)
		res := b.stripeWebhook(t, tc.body, webhookSecret)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", tc.name, res.body)
		require.Equal(t, handlers.TypeMalformed, problemType(t, res), tc.name)
		require.NotContains(t, string(res.body), "\\u0000", tc.name)
		require.Equal(t, before, rowCounts(t, b.pool), tc.name)
		require.EqualValues(t, 0, dbtest.Count(t, b.pool, "SELECT count(*) FROM stripe_events"), tc.name)
	}

	res := b.stripeWebhook(t, rawStripeEvent("evt_good_1", "payment_intent.amount_capturable_updated", intent("pi_test_1", ours)), webhookSecret)
	require.Equal(t, http.StatusOK, res.status, "a well-formed event still passes: %s", res.body)
}

// The signature's timestamp is bounded both ways: one dated beyond the
// tolerance in the future (a replayable event minted ahead) is refused
// like one too old; one a little ahead (clock skew) is accepted.
func TestStripeWebhookRefusesSignaturesFromTheFuture(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := stripeEvent("evt_future", "customer.created", "00000000-0000-4000-8000-000000000000")
	for _, at := range []time.Time{time.Now().AddDate(10, 0, 0), time.Now().Add(6 * time.Minute)} {
		res := b.do(t, http.MethodPost, "/v1/webhooks/stripe", map[string]string{
			"Stripe-Signature": payments.SignWebhook(body, webhookSecret, at),
		}, body)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", at, res.body)
		require.Equal(t, handlers.TypeMalformed, problemType(t, res))
	}
	require.EqualValues(t, 0, dbtest.Count(t, b.pool, "SELECT count(*) FROM stripe_events"))

	res := b.do(t, http.MethodPost, "/v1/webhooks/stripe", map[string]string{
		"Stripe-Signature": payments.SignWebhook(body, webhookSecret, time.Now().Add(time.Minute)),
	}, body)
	require.Equal(t, http.StatusOK, res.status, "a minute ahead is within the tolerance: %s", res.body)
	require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM stripe_events WHERE id = 'evt_future'"))
}
