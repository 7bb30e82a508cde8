package roles

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/payments"
	"boxoffice/domain/timeline"
	"boxoffice/platform/auth"
	"boxoffice/testkit/dbtest"
)

// A whole purchase inside `boxoffice dev` — the organizer's endpoint
// refuses the first webhook attempt, the provider's capture webhook is
// delivered twice — and then its story, as `boxoffice timeline` prints it
// (text and -json) and as the organizer's API serves it: the hold, each
// event with its causation and the consumers that applied it (the
// provider's facts applied by the ingress for the saga included), the
// payment, the provider's webhooks with the duplicate shown as ignored,
// the ticket, and the webhook messages, deliveries and attempts, in that
// order; no secret anywhere. Another organizer gets 404, a buyer 403.
func TestTimelineTellsAWholePurchase(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	env := func(name string) string {
		return map[string]string{"DATABASE_URL": url, "HTTP_ADDR": "127.0.0.1:0", "OPS_ADDR": "127.0.0.1:0",
			"BOXOFFICE_LOG_LEVEL": "warn", "BOXOFFICE_WEBHOOK_RETRY_SCHEDULE": "0s,100ms,1s"}[name]
	}
	out := startDev(t, env)
	re := regexp.MustCompile(`(?s)API\s+(\S+).*Demo event\s+(\S+).*Buyer token\s+(\S+).*Organizer token\s+(\S+)`)
	require.Eventually(t, func() bool { return re.MatchString(out.String()) }, 60*time.Second, 50*time.Millisecond, "dev printed: %s", out)
	m := re.FindStringSubmatch(out.String())
	api, event, buyer, organizer := m[1], m[2], m[3], m[4]
	do := func(method, path, token string, headers map[string]string, body string, into any) int {
		req, err := http.NewRequest(method, api+path, strings.NewReader(body))
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		if into != nil {
			require.NoError(t, json.NewDecoder(res.Body).Decode(into))
		}
		return res.StatusCode
	}

	// The organizer's endpoint answers 500 to the first attempt it ever
	// gets, 204 to the others.
	var hits atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if hits.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	var ep struct{ Secret string }
	require.Equal(t, http.StatusCreated, do(http.MethodPost, "/v1/webhook-endpoints", organizer,
		map[string]string{"Content-Type": "application/json"}, `{"url":"`+hook.URL+`/hooks"}`, &ep))
	require.NotEmpty(t, ep.Secret)

	// The purchase.
	var seats struct{ Seats []struct{ ID, Status string } }
	require.Equal(t, http.StatusOK, do(http.MethodGet, "/v1/events/"+event+"/seats", "", nil, "", &seats))
	var adm struct{ AdmissionToken string }
	require.Equal(t, http.StatusOK, do(http.MethodPost, "/v1/events/"+event+"/waiting-room", buyer, nil, "", &adm))
	var held struct{ OrderID string }
	require.Equal(t, http.StatusAccepted, do(http.MethodPost, "/v1/events/"+event+"/holds", buyer, map[string]string{
		"X-Admission-Token": adm.AdmissionToken, "Idempotency-Key": "timeline-test", "Content-Type": "application/json",
	}, `{"seatIds":["`+seats.Seats[0].ID+`"]}`, &held))
	type order struct {
		Status  string
		Payment *struct{ PaymentIntentID, ClientSecret string }
	}
	var o order
	require.Eventually(t, func() bool {
		o = order{}
		return do(http.MethodGet, "/v1/orders/"+held.OrderID, buyer, nil, "", &o) == http.StatusOK &&
			o.Payment != nil && o.Payment.ClientSecret != ""
	}, 30*time.Second, 20*time.Millisecond, "the order never got a PaymentIntent")
	clientSecret := o.Payment.ClientSecret
	require.Equal(t, http.StatusOK, do(http.MethodPost, "/v1/sandbox/payment-intents/"+o.Payment.PaymentIntentID+"/authorize", buyer, nil, "", nil))
	require.Eventually(t, func() bool {
		o = order{}
		return do(http.MethodGet, "/v1/orders/"+held.OrderID, buyer, nil, "", &o) == http.StatusOK && o.Status == "ticketed"
	}, 30*time.Second, 20*time.Millisecond, "the order never got ticketed: last status %q", &o.Status)

	// The provider delivers its capture webhook once more: ignored.
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var captured struct {
		id      string
		payload []byte
	}
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT event_id, payload::text FROM sandbox_webhook_deliveries
		WHERE payment_intent_id = $1 AND event_type = 'payment_intent.succeeded' AND delivered_at IS NOT NULL`,
		o.Payment.PaymentIntentID).Scan(&captured.id, &captured.payload))
	require.Equal(t, http.StatusOK, do(http.MethodPost, "/v1/webhooks/stripe", "", map[string]string{
		"Content-Type": "application/json", "Stripe-Signature": payments.SignWebhook(captured.payload, DevWebhookKey, time.Now()),
	}, string(captured.payload), nil))

	// Every webhook message of the order delivered (the first after a
	// refused attempt).
	require.Eventually(t, func() bool {
		var pending, delivered int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE d.status <> 'succeeded'), count(*) FILTER (WHERE d.status = 'succeeded')
			FROM webhook_deliveries d JOIN webhook_messages m ON m.id = d.message_id WHERE m.order_id = $1`, held.OrderID).Scan(&pending, &delivered)
		return err == nil && pending == 0 && delivered == 3
	}, 30*time.Second, 50*time.Millisecond, "the order's three webhook messages were never delivered")

	// What the history costs this purchase (docs/timeline.md): one
	// outbox_history row per event, and the order's id on each provider
	// webhook's row. Logged, for the docs; the row count is exact.
	var rows, rowBytes, hooks int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*), sum(pg_column_size(h.*))
		FROM outbox_history h WHERE aggregate_id = $1`, held.OrderID).Scan(&rows, &rowBytes))
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM stripe_events WHERE order_id = $1`, held.OrderID).Scan(&hooks))
	require.Equal(t, 9, rows, "one history row per event of the purchase")
	t.Logf("history of one purchase: %d outbox_history rows, %d bytes of row data (%.0f a row, heap tuple header included; "+
		"plus a 4-byte line pointer and a 44-byte primary key entry each); %d provider webhooks carry the order id",
		rows, rowBytes, float64(rowBytes)/float64(rows), hooks)

	// The command, as text and as JSON.
	cmdEnv := func(name string) string { return map[string]string{"DATABASE_URL": url}[name] }
	var text, js bytes.Buffer
	require.NoError(t, runTimeline(context.Background(), []string{held.OrderID}, cmdEnv, &text))
	require.NoError(t, runTimeline(context.Background(), []string{held.OrderID, "-json"}, cmdEnv, &js))
	t.Logf("boxoffice timeline %s:\n%s", held.OrderID, text.String())
	var story timeline.Timeline
	require.NoError(t, json.Unmarshal(js.Bytes(), &story))
	require.Equal(t, held.OrderID, story.OrderID.String())
	require.Equal(t, "ticketed", story.Status)
	lines := strings.Split(strings.TrimSpace(text.String()), "\n")
	require.Len(t, lines, len(story.Facts)+1, "a header, then a line per fact")
	for i, f := range story.Facts {
		require.Contains(t, lines[i+1], f.Kind, "line %d is fact %d", i+1, i)
		require.Contains(t, lines[i+1], f.ID)
		if i > 0 {
			require.False(t, f.At.Before(story.Facts[i-1].At), "facts in time order: %d", i)
		}
	}

	// Where each fact is, and that it is there.
	find := func(match func(timeline.Fact) bool, what string) int {
		i := slices.IndexFunc(story.Facts, match)
		require.GreaterOrEqual(t, i, 0, "no %s in:\n%s", what, text.String())
		return i
	}
	kind := func(k string) func(timeline.Fact) bool { return func(f timeline.Fact) bool { return f.Kind == k } }
	eventOf := func(typ string) func(timeline.Fact) bool {
		return func(f timeline.Fact) bool { return f.Kind == timeline.KindEvent && f.Type == typ }
	}
	appliedBy := func(typ, consumer string) func(timeline.Fact) bool {
		return func(f timeline.Fact) bool {
			return f.Kind == timeline.KindEventApplied && f.Type == typ && f.Consumer == consumer
		}
	}
	webhook := func(typ string) func(timeline.Fact) bool {
		return func(f timeline.Fact) bool { return f.Kind == timeline.KindProviderWebhook && f.Type == typ }
	}
	ids := map[string]string{} // event type → event id
	for _, f := range story.Facts {
		if f.Kind == timeline.KindEvent {
			ids[f.Type] = f.ID
		}
	}
	// Every event of the purchase, each caused by the one before it or by
	// the provider's webhook, and applied by its consumers.
	causes := map[string]string{
		"HoldCreated":                   "",
		"PaymentAuthorizationRequested": ids["HoldCreated"],
		"PaymentIntentCreated":          ids["PaymentAuthorizationRequested"],
		"PaymentAuthorized":             "stripe:",
		"OrderConfirmed":                ids["PaymentAuthorized"],
		"CaptureRequested":              ids["PaymentAuthorized"],
		"PaymentCaptured":               "stripe:",
		"TicketIssueRequested":          ids["PaymentCaptured"],
		"TicketIssued":                  ids["TicketIssueRequested"],
	}
	for typ, cause := range causes {
		i := find(eventOf(typ), typ)
		if cause == "" {
			require.Empty(t, story.Facts[i].CausationID, typ)
		} else {
			require.True(t, strings.HasPrefix(story.Facts[i].CausationID, cause), "%s caused by %q, not %q", typ, cause, story.Facts[i].CausationID)
		}
	}
	for typ, consumer := range map[string]string{
		"PaymentAuthorizationRequested": "payments", "PaymentIntentCreated": "purchase_saga",
		"PaymentAuthorized": "purchase_saga", "CaptureRequested": "payments", "PaymentCaptured": "purchase_saga",
		"TicketIssueRequested": "tickets", "OrderConfirmed": "webhooks_fanout", "TicketIssued": "webhooks_fanout",
	} {
		require.Greater(t, find(appliedBy(typ, consumer), typ+" applied by "+consumer), find(eventOf(typ), typ))
	}
	hold := find(kind(timeline.KindHoldCreated), "hold")
	payment := find(kind(timeline.KindPaymentCreated), "payment")
	authorizedHook := find(webhook("payment_intent.amount_capturable_updated"), "authorization webhook")
	capturedHook := find(webhook("payment_intent.succeeded"), "capture webhook")
	duplicate := find(kind(timeline.KindProviderDuplicate), "ignored duplicate")
	ticket := find(kind(timeline.KindTicketIssued), "ticket")
	message := find(kind(timeline.KindWebhookMessage), "webhook message")
	delivery := find(kind(timeline.KindWebhookDelivery), "webhook delivery")
	attempt := find(kind(timeline.KindWebhookAttempt), "webhook attempt")
	require.Equal(t, captured.id, story.Facts[duplicate].ID)
	require.Equal(t, 1, story.Facts[duplicate].Count, "delivered twice: one duplicate ignored")
	require.Less(t, hold, find(eventOf("HoldCreated"), "HoldCreated"))
	require.Less(t, find(eventOf("PaymentAuthorizationRequested"), ""), payment)
	require.Less(t, payment, authorizedHook)
	require.Less(t, authorizedHook, find(eventOf("PaymentAuthorized"), ""))
	require.Less(t, find(eventOf("PaymentAuthorized"), ""), capturedHook)
	require.Less(t, capturedHook, find(eventOf("PaymentCaptured"), ""))
	require.Less(t, find(eventOf("TicketIssueRequested"), ""), ticket)
	require.Less(t, capturedHook, duplicate)
	require.Less(t, message, delivery)
	require.Less(t, delivery, attempt)
	var attempts []timeline.Fact
	for _, f := range story.Facts {
		if f.Kind == timeline.KindWebhookAttempt {
			attempts = append(attempts, f)
		}
	}
	require.Len(t, attempts, 4, "three messages, one of them refused once")
	refused := slices.IndexFunc(attempts, func(f timeline.Fact) bool { return strings.Contains(f.Detail, "HTTP 500") })
	require.GreaterOrEqual(t, refused, 0, "the refused attempt is told")
	retried := slices.IndexFunc(attempts, func(f timeline.Fact) bool { return f.ID == attempts[refused].ID && f.Count == 2 })
	require.Greater(t, retried, refused, "the refused delivery's second attempt follows its first")
	require.Contains(t, attempts[retried].Detail, "(retry)")
	require.Contains(t, attempts[retried].Detail, "HTTP 204")

	// Nothing secret: not the client secret, the endpoint's secret, any
	// token, nor the endpoint's URL.
	for _, s := range []string{clientSecret, ep.Secret, "_secret_", "whsec_", buyer, organizer, hook.URL, adm.AdmissionToken} {
		require.NotContains(t, text.String(), s)
		require.NotContains(t, js.String(), s)
	}

	// The organizer's API serves the same story; to another organizer the
	// order does not exist, and a buyer may not ask.
	var served struct {
		OrderID string
		Facts   []timeline.Fact
	}
	require.Equal(t, http.StatusOK, do(http.MethodGet, "/v1/orders/"+held.OrderID+"/timeline", organizer, nil, "", &served))
	require.Equal(t, story.Facts, served.Facts)
	other, err := auth.Mint([]byte(DevJWTSecret), auth.Identity{UserID: uuid.New(), Role: auth.RoleOrganizer, OrganizerID: uuid.New()}, time.Hour)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, do(http.MethodGet, "/v1/orders/"+held.OrderID+"/timeline", other, nil, "", nil))
	require.Equal(t, http.StatusForbidden, do(http.MethodGet, "/v1/orders/"+held.OrderID+"/timeline", buyer, nil, "", nil))

	// The binary prints the same story, as text and as JSON.
	bin := buildBoxoffice(t)
	for _, args := range [][]string{{"timeline", held.OrderID}, {"timeline", "-json", held.OrderID}} {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "%v: %s", args, stderr.String())
		want := text.String()
		if len(args) == 3 {
			want = js.String()
		}
		require.Equal(t, want, stdout.String(), "%v", args)
		require.Empty(t, stderr.String())
	}

	// The organizer refunds the order; the provider confirms. The story
	// goes on: the refund asked for and applied by the payments consumer,
	// the provider's refund webhook and the PaymentRefunded it caused,
	// applied by the ingress for the saga, the ticket revoked, and the
	// order.refunded message delivered.
	require.Equal(t, http.StatusAccepted, do(http.MethodPost, "/v1/orders/"+held.OrderID+"/refund", organizer, nil, "", nil))
	require.Eventually(t, func() bool {
		o = order{}
		return do(http.MethodGet, "/v1/orders/"+held.OrderID, buyer, nil, "", &o) == http.StatusOK && o.Status == "refunded"
	}, 30*time.Second, 20*time.Millisecond, "the order was never refunded: last status %q", &o.Status)
	require.Eventually(t, func() bool {
		var delivered int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM webhook_deliveries d JOIN webhook_messages m ON m.id = d.message_id
			WHERE m.order_id = $1 AND m.event_type = 'order.refunded' AND d.status = 'succeeded'`, held.OrderID).Scan(&delivered)
		return err == nil && delivered == 1
	}, 30*time.Second, 50*time.Millisecond, "order.refunded was never delivered")
	story = timeline.Timeline{}
	js.Reset()
	require.NoError(t, runTimeline(context.Background(), []string{"-json", held.OrderID}, cmdEnv, &js))
	require.NoError(t, json.Unmarshal(js.Bytes(), &story))
	require.Equal(t, "refunded", story.Status)
	refundAsked := find(eventOf("RefundRequested"), "RefundRequested")
	require.Greater(t, find(appliedBy("RefundRequested", "payments"), "RefundRequested applied by payments"), refundAsked)
	refundHook := find(func(f timeline.Fact) bool {
		return f.Kind == timeline.KindProviderWebhook && (f.Type == "charge.refunded" || f.Type == "refund.updated")
	}, "refund webhook")
	refunded := find(eventOf("PaymentRefunded"), "PaymentRefunded")
	require.True(t, strings.HasPrefix(story.Facts[refunded].CausationID, "stripe:"), story.Facts[refunded].CausationID)
	require.Less(t, refundAsked, refundHook)
	require.Less(t, refundHook, refunded)
	require.Greater(t, find(appliedBy("PaymentRefunded", "purchase_saga"), "PaymentRefunded applied for the saga"), refunded)
	require.Greater(t, find(kind(timeline.KindTicketRevoked), "ticket revoked"), ticket)
	require.Greater(t, find(func(f timeline.Fact) bool { return f.Kind == timeline.KindWebhookMessage && f.Type == "order.refunded" },
		"order.refunded message"), refunded)

	// An order the database does not hold, and a command line that does
	// not name one order.
	require.ErrorContains(t, runTimeline(context.Background(), []string{uuid.NewString()}, cmdEnv, io.Discard), "not in this database")
	var usage *UsageError
	require.ErrorAs(t, runTimeline(context.Background(), nil, cmdEnv, io.Discard), &usage)
	require.ErrorAs(t, runTimeline(context.Background(), []string{"not-a-uuid"}, cmdEnv, io.Discard), &usage)
}
