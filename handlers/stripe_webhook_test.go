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
			"id": intentOf(orderID), "object": "payment_intent", "amount": 10000, "currency": "eur",
			"amount_capturable": 10000, "amount_received": 0, "status": "requires_capture",
			"metadata": map[string]string{"order_id": orderID},
		}},
	})
	return raw
}

// intentOf is the PaymentIntent id stripeEvent gives orderID's intent:
// from the random end of the id, since ids made in one millisecond share
// their beginning.
func intentOf(orderID string) string { return "pi_test_" + strings.ReplaceAll(orderID[19:], "-", "") }

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
		// The order's timeline: the webhook names its order, the nine
		// deliveries that had no effect are counted, and the event's
		// history row was written with it, once.
		require.EqualValues(t, 9, dbtest.Count(t, b.pool,
			"SELECT duplicates FROM stripe_events WHERE id = 'evt_auth_1' AND order_id = $1 AND last_duplicate_at IS NOT NULL", orderID))
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, `SELECT count(*) FROM outbox_history
			WHERE aggregate_id = $1 AND event_type = $2 AND causation_id = 'stripe:evt_auth_1' AND applied_by IS NULL`,
			orderID, outbox.TypePaymentAuthorized))

		var raw []byte
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT envelope FROM outbox WHERE event_type = $1", outbox.TypePaymentAuthorized).Scan(&raw))
		var env outbox.Envelope
		require.NoError(t, json.Unmarshal(raw, &env))
		require.Equal(t, orderID, env.AggregateID.String())
		require.Equal(t, "stripe:evt_auth_1", env.CausationID)
		require.Equal(t, held.header.Get("X-Correlation-Id"), env.CorrelationID, "the buyer journey's correlation id follows the order")
		require.Empty(t, env.AppliedBy, "no payment row yet: too early, left to the saga's consumer")
		require.Equal(t, "pending_payment", orderStatus(t, b, orderID))
		var p outbox.PaymentAuthorized
		require.NoError(t, json.Unmarshal(env.Payload, &p))
		require.Equal(t, outbox.PaymentAuthorized{OrderID: env.AggregateID, PaymentIntentID: intentOf(orderID),
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

// orderStatus is the order's status in the database.
func orderStatus(t *testing.T, b *testBundle, orderID string) string {
	t.Helper()
	var status string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT status FROM orders WHERE id = $1", orderID).Scan(&status))
	return status
}

// outboxEvents are the envelopes of the order's events of typ, in order.
func outboxEvents(t *testing.T, b *testBundle, orderID, typ string) []outbox.Envelope {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), "SELECT envelope FROM outbox WHERE aggregate_id = $1 AND event_type = $2 ORDER BY seq", orderID, typ)
	require.NoError(t, err)
	defer rows.Close()
	var out []outbox.Envelope
	for rows.Next() {
		var raw []byte
		require.NoError(t, rows.Scan(&raw))
		var env outbox.Envelope
		require.NoError(t, json.Unmarshal(raw, &env))
		out = append(out, env)
	}
	require.NoError(t, rows.Err())
	return out
}

// Stripe's facts are applied where they arrive: the authorization
// webhook's transaction confirms the hold and asks for the capture, the
// capture webhook's marks the order paid and asks for the tickets, with
// no saga consumer running, and the fact goes on the bus marked as
// applied for the saga (AppliedBy), caused by the provider's event and
// causing the effects. Ten racing deliveries of each have one effect. A
// capture that overtakes its authorization is too early: recorded for the
// saga's consumer, unapplied, the order untouched.
func TestStripeWebhookAppliesTheFactWhereItArrives(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := b.createEvent(t, b.organizer(t))
	_, tok := b.buyer(t)
	payRow := func(orderID string) {
		dbtest.Exec(t, b.pool, `INSERT INTO payments (order_id, provider, payment_intent_id, client_secret, status, amount_minor, currency)
			SELECT id, 'stripe', $2, 'pi_secret_test', 'requires_payment_method', amount_minor, currency FROM orders WHERE id = $1`,
			orderID, intentOf(orderID))
	}
	tenTimes := func(body []byte) {
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				res := b.stripeWebhook(t, body, webhookSecret)
				require.Equal(t, http.StatusOK, res.status, "%s", res.body)
			})
		}
		wg.Wait()
	}

	held := b.hold(t, tok, b.admit(t, tok, ev.ID), ev.ID, "applied", ev.Seats[0])
	require.Equal(t, http.StatusAccepted, held.status)
	orderID := held.json(t)["orderId"].(string)
	payRow(orderID)

	tenTimes(stripeEvent("evt_applied_auth", "payment_intent.amount_capturable_updated", orderID))
	require.Equal(t, "capture_pending", orderStatus(t, b, orderID))
	facts := outboxEvents(t, b, orderID, outbox.TypePaymentAuthorized)
	require.Len(t, facts, 1)
	require.Equal(t, "purchase_saga", facts[0].AppliedBy)
	require.Equal(t, "stripe:evt_applied_auth", facts[0].CausationID)
	for _, typ := range []string{outbox.TypeOrderConfirmed, outbox.TypeCaptureRequested} {
		effects := outboxEvents(t, b, orderID, typ)
		require.Len(t, effects, 1, typ)
		require.Equal(t, facts[0].EventID.String(), effects[0].CausationID, "%s is caused by the fact", typ)
		require.Equal(t, facts[0].CorrelationID, effects[0].CorrelationID)
		require.Empty(t, effects[0].AppliedBy)
	}

	captured := stripeEvent("evt_applied_capture", "payment_intent.succeeded", orderID)
	tenTimes(captured)
	require.Equal(t, "paid", orderStatus(t, b, orderID))
	facts = outboxEvents(t, b, orderID, outbox.TypePaymentCaptured)
	require.Len(t, facts, 1)
	require.Equal(t, "purchase_saga", facts[0].AppliedBy)
	tickets := outboxEvents(t, b, orderID, outbox.TypeTicketIssueRequested)
	require.Len(t, tickets, 1)
	require.Equal(t, facts[0].EventID.String(), tickets[0].CausationID)
	var status string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT status FROM payments WHERE order_id = $1", orderID).Scan(&status))
	require.Equal(t, "succeeded", status)

	// A capture before its authorization was applied.
	early := b.hold(t, tok, b.admit(t, tok, ev.ID), ev.ID, "early", ev.Seats[1])
	require.Equal(t, http.StatusAccepted, early.status)
	earlyID := early.json(t)["orderId"].(string)
	payRow(earlyID)
	res := b.stripeWebhook(t, stripeEvent("evt_early_capture", "payment_intent.succeeded", earlyID), webhookSecret)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Equal(t, "pending_payment", orderStatus(t, b, earlyID))
	facts = outboxEvents(t, b, earlyID, outbox.TypePaymentCaptured)
	require.Len(t, facts, 1)
	require.Empty(t, facts[0].AppliedBy, "left to the saga's consumer, which applies it once the authorization is")
	require.Empty(t, outboxEvents(t, b, earlyID, outbox.TypeTicketIssueRequested))
}
