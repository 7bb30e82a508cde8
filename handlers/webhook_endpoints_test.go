package handlers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/catalog"
	"boxoffice/domain/cells"
	"boxoffice/domain/purchase"
	"boxoffice/domain/webhooks"
	"boxoffice/handlers"
	"boxoffice/platform/admission"
	"boxoffice/platform/auth"
	"boxoffice/sqlcgen"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
)

// setupWebhooks is setup with the webhook service; allowPrivate is the
// SSRF guard's BOXOFFICE_WEBHOOK_ALLOW_PRIVATE.
func setupWebhooks(t *testing.T, allowPrivate bool) *testBundle {
	t.Helper()
	pool := dbtest.New(t)
	logs := testkit.NewLog(t)
	logger := logs.Logger
	signer := admission.NewSigner(admission.SignerConfig{Key: admissionKey})
	cat := catalog.New(pool)
	h := handlers.New(handlers.Config{
		Cells: cells.Single(&cells.Cell{
			Name:     cells.Default,
			Catalog:  cat,
			Purchase: purchase.NewService(pool, logger, purchase.Config{}),
			Room:     fixedRoom(signer, cat, logger),
			Webhooks: webhooks.NewService(pool, webhooks.ServiceConfig{Guard: &webhooks.Guard{AllowPrivate: allowPrivate}, Keys: testWebhookKeys, Logger: logger}),
		}),
		Logger:    logger,
		Bearer:    auth.NewVerifier(jwtSecret),
		Admission: signer,
	})
	srv := httptest.NewServer(validating(t, h.Handler()))
	t.Cleanup(srv.Close)
	b := &testBundle{pool: pool, srv: srv, logs: logs}
	t.Cleanup(b.requireNoSecretsLogged(t))
	return b
}

// organizerOf returns an organizer's token and id.
func (b *testBundle) organizerOf(t *testing.T) (string, uuid.UUID) {
	id := uuid.New()
	return b.token(t, auth.Identity{UserID: uuid.New(), Role: auth.RoleOrganizer, OrganizerID: id}), id
}

// createEndpoint creates an endpoint and remembers its secret.
func (b *testBundle) createEndpoint(t *testing.T, tok string, body map[string]any) map[string]any {
	t.Helper()
	res := b.do(t, http.MethodPost, "/v1/webhook-endpoints", bearer(tok), body)
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	m := res.json(t)
	secret, _ := m["secret"].(string)
	require.True(t, strings.HasPrefix(secret, "whsec_"), "the secret is shown at creation")
	b.remember(secret)
	return m
}

// storeMessage stores a message for org and queues it to org's endpoints,
// as the fan-out does.
func storeMessage(t *testing.T, b *testBundle, org uuid.UUID, typ string, at time.Time) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	q := sqlcgen.New()
	id, err := q.WebhookMessageInsert(ctx, b.pool, sqlcgen.WebhookMessageInsertParams{
		ID: uuid.Must(uuid.NewV7()), OrganizerID: org, EventType: typ,
		Payload:   []byte(fmt.Sprintf(`{"type":%q,"timestamp":%q,"data":{}}`, typ, at.UTC().Format(time.RFC3339Nano))),
		SourceKey: uuid.NewString(), CreatedAt: at,
	})
	require.NoError(t, err)
	_, err = q.WebhookDeliveryFanOut(ctx, b.pool, sqlcgen.WebhookDeliveryFanOutParams{MessageID: id, OrganizerID: org, EventType: typ})
	require.NoError(t, err)
	return id
}

func TestWebhookEndpoints(t *testing.T) {
	t.Parallel()

	t.Run("CreateReadUpdateDeleteNeverShowsTheSecretAgain", func(t *testing.T) {
		t.Parallel()
		b := setupWebhooks(t, true)
		tok, _ := b.organizerOf(t)
		created := b.createEndpoint(t, tok, map[string]any{
			"url": "http://127.0.0.1:9/hook", "description": "CRM", "eventTypes": []string{"order.paid", "ticket.issued"},
			"rateLimitPerSecond": 50,
		})
		id := created["id"].(string)
		secret := created["secret"].(string)
		require.Equal(t, "closed", created["circuitState"])
		require.Equal(t, float64(10), created["maxConcurrency"])

		got := b.do(t, http.MethodGet, "/v1/webhook-endpoints/"+id, bearer(tok), nil)
		require.Equal(t, http.StatusOK, got.status, "%s", got.body)
		require.NotContains(t, string(got.body), secret)
		require.NotContains(t, got.json(t), "secret")
		require.Equal(t, []any{"order.paid", "ticket.issued"}, got.json(t)["eventTypes"])

		list := b.do(t, http.MethodGet, "/v1/webhook-endpoints", bearer(tok), nil)
		require.Equal(t, http.StatusOK, list.status)
		require.NotContains(t, string(list.body), secret)
		require.Len(t, list.json(t)["endpoints"], 1)

		upd := b.do(t, http.MethodPatch, "/v1/webhook-endpoints/"+id, bearer(tok), map[string]any{
			"description": "ERP", "eventTypes": []string{}, "enabled": false, "rateLimitPerSecond": 0,
		})
		require.Equal(t, http.StatusOK, upd.status, "%s", upd.body)
		m := upd.json(t)
		require.Equal(t, "ERP", m["description"])
		require.Equal(t, []any{}, m["eventTypes"])
		require.Equal(t, false, m["enabled"])
		require.Equal(t, "user", m["disabledReason"])
		require.NotContains(t, m, "rateLimitPerSecond")
		require.NotContains(t, string(upd.body), secret)

		upd = b.do(t, http.MethodPatch, "/v1/webhook-endpoints/"+id, bearer(tok), map[string]any{"enabled": true})
		require.Equal(t, http.StatusOK, upd.status)
		require.NotContains(t, upd.json(t), "disabledReason")

		rot := b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+id+"/rotate-secret", bearer(tok), nil)
		require.Equal(t, http.StatusOK, rot.status, "%s", rot.body)
		newSecret := rot.json(t)["secret"].(string)
		b.remember(newSecret)
		require.NotEqual(t, secret, newSecret)
		got = b.do(t, http.MethodGet, "/v1/webhook-endpoints/"+id, bearer(tok), nil)
		require.NotContains(t, string(got.body), newSecret)

		del := b.do(t, http.MethodDelete, "/v1/webhook-endpoints/"+id, bearer(tok), nil)
		require.Equal(t, http.StatusNoContent, del.status, "%s", del.body)
		require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/v1/webhook-endpoints/"+id, bearer(tok), nil).status)
	})

	t.Run("InvalidInputIsAClearProblemAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setupWebhooks(t, false)
		tok, _ := b.organizerOf(t)
		for name, tc := range map[string]struct {
			body     any
			status   int
			location string
		}{
			"MissingURL":        {map[string]any{"description": "x"}, 422, "property url"},
			"UnknownEventType":  {map[string]any{"url": "https://93.184.216.34/h", "eventTypes": []string{"order.exploded"}}, 422, "body.eventTypes"},
			"Loopback":          {map[string]any{"url": "https://127.0.0.1/h"}, 422, "body.url"},
			"Private10":         {map[string]any{"url": "https://10.0.0.7/h"}, 422, "body.url"},
			"Metadata":          {map[string]any{"url": "https://169.254.169.254/latest/meta-data"}, 422, "body.url"},
			"IPv6Loopback":      {map[string]any{"url": "https://[::1]/h"}, 422, "body.url"},
			"PlainHTTP":         {map[string]any{"url": "http://93.184.216.34/h"}, 422, "body.url"},
			"RateLimitZero":     {map[string]any{"url": "https://93.184.216.34/h", "rateLimitPerSecond": 0}, 422, "body.rateLimitPerSecond"},
			"ConcurrencyTooBig": {map[string]any{"url": "https://93.184.216.34/h", "maxConcurrency": 5000}, 422, "body.maxConcurrency"},
			"NotJSON":           {"{", 400, ""},
		} {
			res := b.do(t, http.MethodPost, "/v1/webhook-endpoints", bearer(tok), tc.body)
			require.Equal(t, tc.status, res.status, "%s: %s", name, res.body)
			require.Equal(t, "application/problem+json", res.header.Get("Content-Type"), name)
			if tc.location != "" {
				require.Contains(t, string(res.body), tc.location, name)
			}
			require.NotContains(t, string(res.body), "SQL", name)
		}
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_endpoints"), "nothing was written")
		// A public https URL is accepted.
		b.createEndpoint(t, tok, map[string]any{"url": "https://93.184.216.34/h"})
	})

	t.Run("OtherOrganizersResourcesAre404OnEveryRoute", func(t *testing.T) {
		t.Parallel()
		b := setupWebhooks(t, true)
		owner, ownerOrg := b.organizerOf(t)
		intruder, _ := b.organizerOf(t)
		e := b.createEndpoint(t, owner, map[string]any{"url": "http://127.0.0.1:9/hook"})
		eid := e["id"].(string)
		msg := storeMessage(t, b, ownerOrg, webhooks.EventOrderPaid, time.Now())
		since := map[string]any{"since": time.Now().Add(-time.Hour).Format(time.RFC3339)}

		for _, r := range []struct {
			method, path string
			body         any
		}{
			{http.MethodGet, "/v1/webhook-endpoints/" + eid, nil},
			{http.MethodPatch, "/v1/webhook-endpoints/" + eid, map[string]any{"description": "mine now"}},
			{http.MethodDelete, "/v1/webhook-endpoints/" + eid, nil},
			{http.MethodPost, "/v1/webhook-endpoints/" + eid + "/rotate-secret", nil},
			{http.MethodPost, "/v1/webhook-endpoints/" + eid + "/recover", since},
			{http.MethodGet, "/v1/webhook-messages/" + msg.String() + "/attempts", nil},
			{http.MethodPost, "/v1/webhook-messages/" + msg.String() + "/replay", nil},
			{http.MethodPost, "/v1/webhook-messages/" + msg.String() + "/replay", map[string]any{"endpointId": eid}},
		} {
			res := b.do(t, r.method, r.path, bearer(intruder), r.body)
			require.Equal(t, http.StatusNotFound, res.status, "%s %s: %s", r.method, r.path, res.body)
			require.Equal(t, handlers.TypeNotFound, problemType(t, res))
		}
		list := b.do(t, http.MethodGet, "/v1/webhook-endpoints", bearer(intruder), nil)
		require.Equal(t, http.StatusOK, list.status)
		require.Empty(t, list.json(t)["endpoints"])
		msgs := b.do(t, http.MethodGet, "/v1/webhook-messages", bearer(intruder), nil)
		require.Equal(t, http.StatusOK, msgs.status)
		require.Empty(t, msgs.json(t)["messages"])

		// Nothing changed for the owner.
		got := b.do(t, http.MethodGet, "/v1/webhook-endpoints/"+eid, bearer(owner), nil)
		require.Equal(t, http.StatusOK, got.status)
		require.Equal(t, "", got.json(t)["description"])
		require.Equal(t, int64(0), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_endpoints WHERE previous_secret IS NOT NULL"))

		// Buyers may not use the routes at all; anonymous callers neither.
		_, buyer := b.buyer(t)
		require.Equal(t, http.StatusForbidden, b.do(t, http.MethodGet, "/v1/webhook-endpoints", bearer(buyer), nil).status)
		require.Equal(t, http.StatusUnauthorized, b.do(t, http.MethodGet, "/v1/webhook-messages", nil, nil).status)
	})

	t.Run("MessagesFilterAndPaginate", func(t *testing.T) {
		t.Parallel()
		b := setupWebhooks(t, true)
		tok, org := b.organizerOf(t)
		b.createEndpoint(t, tok, map[string]any{"url": "http://127.0.0.1:9/hook"})
		base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
		var ids []uuid.UUID
		for i := range 5 {
			typ := webhooks.EventOrderPaid
			if i%2 == 1 {
				typ = webhooks.EventTicketIssued
			}
			ids = append(ids, storeMessage(t, b, org, typ, base.Add(time.Duration(i)*time.Minute)))
		}
		var seen []string
		cursor := ""
		for page := 0; ; page++ {
			path := "/v1/webhook-messages?limit=2"
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			res := b.do(t, http.MethodGet, path, bearer(tok), nil)
			require.Equal(t, http.StatusOK, res.status, "%s", res.body)
			m := res.json(t)
			for _, msg := range m["messages"].([]any) {
				mm := msg.(map[string]any)
				seen = append(seen, mm["id"].(string))
				require.Equal(t, "msg_"+mm["id"].(string), mm["webhookId"])
				require.Equal(t, mm["type"], mm["payload"].(map[string]any)["type"])
			}
			next, _ := m["nextCursor"].(string)
			if next == "" {
				break
			}
			cursor = next
			require.Less(t, page, 5)
		}
		want := []string{ids[4].String(), ids[3].String(), ids[2].String(), ids[1].String(), ids[0].String()}
		require.Equal(t, want, seen, "newest first, each once")

		res := b.do(t, http.MethodGet, "/v1/webhook-messages?type=ticket.issued", bearer(tok), nil)
		require.Equal(t, http.StatusOK, res.status)
		require.Len(t, res.json(t)["messages"], 2)
		res = b.do(t, http.MethodGet, "/v1/webhook-messages?since="+base.Add(150*time.Second).UTC().Format(time.RFC3339Nano), bearer(tok), nil)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		require.Len(t, res.json(t)["messages"], 2)

		for _, bad := range []string{"?type=order.exploded", "?since=yesterday", "?cursor=garbage!"} {
			res := b.do(t, http.MethodGet, "/v1/webhook-messages"+bad, bearer(tok), nil)
			require.Equal(t, http.StatusUnprocessableEntity, res.status, "%s: %s", bad, res.body)
		}
	})

	t.Run("ReplayRecoverAndAttempts", func(t *testing.T) {
		t.Parallel()
		b := setupWebhooks(t, true)
		tok, org := b.organizerOf(t)
		e := b.createEndpoint(t, tok, map[string]any{"url": "http://127.0.0.1:9/hook"})
		eid := e["id"].(string)
		msg := storeMessage(t, b, org, webhooks.EventOrderPaid, time.Now())
		dbtest.Exec(t, b.pool, "UPDATE webhook_deliveries SET status = 'dead', attempts = 3, next_attempt_at = NULL")
		dbtest.Exec(t, b.pool, `INSERT INTO webhook_attempts (delivery_id, message_id, endpoint_id, organizer_id, number, trigger, status_code, latency_ms, error_class)
			SELECT id, message_id, endpoint_id, organizer_id, 1, 'original', 400, 12, 'http_4xx' FROM webhook_deliveries`)

		att := b.do(t, http.MethodGet, "/v1/webhook-messages/"+webhooks.MessageID(msg)+"/attempts", bearer(tok), nil)
		require.Equal(t, http.StatusOK, att.status, "%s", att.body)
		a := att.json(t)["attempts"].([]any)
		require.Len(t, a, 1)
		require.Equal(t, "original", a[0].(map[string]any)["trigger"])
		require.Equal(t, float64(400), a[0].(map[string]any)["statusCode"])

		rec := b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+eid+"/recover", bearer(tok), map[string]any{"since": time.Now().Add(-time.Hour).Format(time.RFC3339)})
		require.Equal(t, http.StatusAccepted, rec.status, "%s", rec.body)
		require.Equal(t, float64(1), rec.json(t)["queued"])
		require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_deliveries WHERE status = 'pending' AND next_trigger = 'recover' AND retry_base = 3"))

		rep := b.do(t, http.MethodPost, "/v1/webhook-messages/"+msg.String()+"/replay", bearer(tok), map[string]any{"endpointId": eid})
		require.Equal(t, http.StatusAccepted, rep.status, "%s", rep.body)
		require.Equal(t, float64(1), rep.json(t)["queued"])
		rep = b.do(t, http.MethodPost, "/v1/webhook-messages/"+msg.String()+"/replay", bearer(tok), nil)
		require.Equal(t, http.StatusAccepted, rep.status, "%s", rep.body)

		// A disabled endpoint cannot be recovered or replayed to.
		require.Equal(t, http.StatusOK, b.do(t, http.MethodPatch, "/v1/webhook-endpoints/"+eid, bearer(tok), map[string]any{"enabled": false}).status)
		require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_deliveries WHERE status = 'failed'"), "disabling keeps the delivery as failed")
		rec = b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+eid+"/recover", bearer(tok), map[string]any{"since": time.Now().Add(-time.Hour).Format(time.RFC3339)})
		require.Equal(t, http.StatusConflict, rec.status, "%s", rec.body)
		rep = b.do(t, http.MethodPost, "/v1/webhook-messages/"+msg.String()+"/replay", bearer(tok), map[string]any{"endpointId": eid})
		require.Equal(t, http.StatusConflict, rep.status, "%s", rep.body)
	})
	t.Run("NeedsReviewIsListedAndRetriedWithWhoAndWhy", func(t *testing.T) {
		t.Parallel()
		b := setupWebhooks(t, true)
		tok, org := b.organizerOf(t)
		e := b.createEndpoint(t, tok, map[string]any{"url": "http://127.0.0.1:9/hook"})
		eid := e["id"].(string)
		msg := storeMessage(t, b, org, webhooks.EventOrderPaid, time.Now())
		dbtest.Exec(t, b.pool, "UPDATE webhook_deliveries SET status = 'needs_review', attempts = 1, next_attempt_at = NULL, last_error = 'http_4xx (status 400)'")
		dbtest.Exec(t, b.pool, `INSERT INTO webhook_attempts (delivery_id, message_id, endpoint_id, organizer_id, number, trigger, status_code, latency_ms, error_class)
			SELECT id, message_id, endpoint_id, organizer_id, 1, 'recover', 400, 12, 'http_4xx' FROM webhook_deliveries`)

		list := b.do(t, http.MethodGet, "/v1/webhook-messages?status=needs_review", bearer(tok), nil)
		require.Equal(t, http.StatusOK, list.status, "%s", list.body)
		ms := list.json(t)["messages"].([]any)
		require.Len(t, ms, 1)
		d := ms[0].(map[string]any)["deliveries"].([]any)[0].(map[string]any)
		require.Equal(t, "needs_review", d["status"])
		require.Equal(t, "http_4xx (status 400)", d["lastError"])
		att := b.do(t, http.MethodGet, "/v1/webhook-messages/"+webhooks.MessageID(msg)+"/attempts", bearer(tok), nil)
		require.Equal(t, http.StatusOK, att.status, "%s", att.body)
		require.Equal(t, "recover", att.json(t)["attempts"].([]any)[0].(map[string]any)["trigger"])

		since := time.Now().Add(-time.Hour)
		bad := b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+eid+"/recover", bearer(tok), map[string]any{
			"since": since.Format(time.RFC3339), "until": since.Add(-time.Minute).Format(time.RFC3339),
		})
		require.Equal(t, http.StatusUnprocessableEntity, bad.status, "%s", bad.body)
		require.Equal(t, handlers.TypeValidation, problemType(t, bad))
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_redeliveries"), "a refused recover records nothing")

		rec := b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+eid+"/recover", bearer(tok), map[string]any{
			"since": since.Format(time.RFC3339), "until": time.Now().Add(time.Minute).Format(time.RFC3339), "reason": "schema fixed",
		})
		require.Equal(t, http.StatusAccepted, rec.status, "%s", rec.body)
		require.Equal(t, float64(1), rec.json(t)["queued"])
		require.Equal(t, int64(1), dbtest.Count(t, b.pool,
			"SELECT count(*) FROM webhook_deliveries WHERE status = 'pending' AND next_trigger = 'recover'"))
		rep := b.do(t, http.MethodPost, "/v1/webhook-messages/"+msg.String()+"/replay", bearer(tok), map[string]any{"reason": "once more"})
		require.Equal(t, http.StatusAccepted, rep.status, "%s", rep.body)

		var who, why []string
		rows, err := b.pool.Query(context.Background(), "SELECT requested_by, kind || ': ' || reason FROM webhook_redeliveries WHERE organizer_id = $1 ORDER BY created_at", org)
		require.NoError(t, err)
		for rows.Next() {
			var w, r string
			require.NoError(t, rows.Scan(&w, &r))
			who, why = append(who, w), append(why, r)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, []string{"recover: schema fixed", "replay: once more"}, why)
		for _, w := range who {
			require.Regexp(t, `^(user|api_key):[0-9a-f-]{36}$`, w, "who asked: the caller's user or API key")
		}
	})
}

// An organizer has at most 20 endpoints, and one per URL: beyond the
// limit, a second endpoint for a URL (however spelled), or a change to
// another endpoint's URL is a 409 problem with a stable type, and writes
// nothing.
// payloadVersion: 1 unless asked, 2 on request, changed by PATCH, and
// anything else a 422 that writes nothing.
func TestWebhookEndpointPayloadVersion(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, true)
	tok, _ := b.organizerOf(t)
	plain := b.createEndpoint(t, tok, map[string]any{"url": "http://127.0.0.1:9/v1"})
	require.Equal(t, float64(1), plain["payloadVersion"])
	camel := b.createEndpoint(t, tok, map[string]any{"url": "http://127.0.0.1:9/v2", "payloadVersion": 2})
	require.Equal(t, float64(2), camel["payloadVersion"])

	upd := b.do(t, http.MethodPatch, "/v1/webhook-endpoints/"+plain["id"].(string), bearer(tok), map[string]any{"payloadVersion": 2})
	require.Equal(t, http.StatusOK, upd.status, "%s", upd.body)
	require.Equal(t, float64(2), upd.json(t)["payloadVersion"])

	for _, bad := range []any{0, 3, "2"} {
		res := b.do(t, http.MethodPost, "/v1/webhook-endpoints", bearer(tok), map[string]any{"url": "http://127.0.0.1:9/x", "payloadVersion": bad})
		require.Equal(t, http.StatusUnprocessableEntity, res.status, "%v: %s", bad, res.body)
		require.Contains(t, string(res.body), "payloadVersion")
		res = b.do(t, http.MethodPatch, "/v1/webhook-endpoints/"+camel["id"].(string), bearer(tok), map[string]any{"payloadVersion": bad})
		require.Equal(t, http.StatusUnprocessableEntity, res.status, "%v: %s", bad, res.body)
	}
	require.EqualValues(t, 2, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_endpoints"))
	require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_endpoints WHERE payload_version = 1"))
}

func TestWebhookEndpointBounds(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, true)
	tok, org := b.organizerOf(t)
	first := b.createEndpoint(t, tok, map[string]any{"url": "http://127.0.0.1:9/hook"})

	for _, u := range []string{"http://127.0.0.1:9/hook", "HTTP://127.0.0.1:9/hook"} {
		res := b.do(t, http.MethodPost, "/v1/webhook-endpoints", bearer(tok), map[string]any{"url": u})
		require.Equal(t, http.StatusConflict, res.status, "%s: %s", u, res.body)
		require.Equal(t, handlers.TypeEndpointURLInUse, problemType(t, res))
	}
	second := b.createEndpoint(t, tok, map[string]any{"url": "http://127.0.0.1:9/other"})
	res := b.do(t, http.MethodPatch, "/v1/webhook-endpoints/"+second["id"].(string), bearer(tok), map[string]any{"url": "http://127.0.0.1:9/hook"})
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	require.Equal(t, handlers.TypeEndpointURLInUse, problemType(t, res))
	res = b.do(t, http.MethodPatch, "/v1/webhook-endpoints/"+first["id"].(string), bearer(tok), map[string]any{"url": "http://127.0.0.1:9/hook", "description": "same URL"})
	require.Equal(t, http.StatusOK, res.status, "an endpoint keeps its own URL: %s", res.body)

	for i := 2; i < webhooks.DefaultMaxEndpoints; i++ {
		b.createEndpoint(t, tok, map[string]any{"url": fmt.Sprintf("http://127.0.0.1:9/hook-%d", i), "enabled": i%2 == 0})
	}
	res = b.do(t, http.MethodPost, "/v1/webhook-endpoints", bearer(tok), map[string]any{"url": "http://127.0.0.1:9/one-too-many"})
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	require.Equal(t, handlers.TypeEndpointLimit, problemType(t, res))
	require.Contains(t, res.json(t)["detail"], "20")
	require.Equal(t, int64(webhooks.DefaultMaxEndpoints), dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_endpoints WHERE organizer_id = $1", org))

	other, _ := b.organizerOf(t)
	b.createEndpoint(t, other, map[string]any{"url": "http://127.0.0.1:9/hook"})
}
