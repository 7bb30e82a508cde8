package handlers_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"boxoffice/domain/webhooks"
	"boxoffice/handlers"
	"boxoffice/testkit/dbtest"
)

// testWebhookKeys seals the endpoint secrets of the handler tests.
var testWebhookKeys = func() *webhooks.Keyring {
	k, err := webhooks.ParseKeyring("test:" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, webhooks.KeyringKeyBytes)))
	if err != nil {
		panic(err)
	}
	return k
}()

// runWebhookDispatcher runs a dispatcher on the test's database until the
// test ends.
func runWebhookDispatcher(t *testing.T, b *testBundle) {
	t.Helper()
	d, err := webhooks.NewDispatcher(b.pool, webhooks.DispatcherConfig{
		Guard: &webhooks.Guard{AllowPrivate: true}, Keys: testWebhookKeys, RetrySchedule: []time.Duration{0, 100 * time.Millisecond},
		PollInterval: 10 * time.Millisecond, FlushInterval: 5 * time.Millisecond, Logger: b.logs.Logger,
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

type hookRequest struct {
	header http.Header
	body   []byte
}

func newHookReceiver(t *testing.T) (*httptest.Server, chan hookRequest) {
	t.Helper()
	got := make(chan hookRequest, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- hookRequest{r.Header.Clone(), body}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestWebhookEndpointTooling(t *testing.T) {
	t.Parallel()

	t.Run("TestDeliveryArrivesSigned", func(t *testing.T) {
		t.Parallel()
		b := setupWebhooks(t, true)
		tok, _ := b.organizerOf(t)
		srv, got := newHookReceiver(t)
		e := b.createEndpoint(t, tok, map[string]any{"url": srv.URL, "eventTypes": []string{"order.paid"}})
		eid := e["id"].(string)
		runWebhookDispatcher(t, b)

		res := b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+eid+"/test", bearer(tok), nil)
		require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
		m := res.json(t)
		require.Equal(t, webhooks.EventWebhookTest, m["type"])
		queued := m["deliveries"].([]any)
		require.Len(t, queued, 1, "to this endpoint only")
		require.Equal(t, map[string]any{"endpointId": eid, "status": "pending"}, map[string]any{
			"endpointId": queued[0].(map[string]any)["endpointId"], "status": queued[0].(map[string]any)["status"],
		})
		var req hookRequest
		select {
		case req = <-got:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "no test delivery arrived")
		}
		wh, err := standardwebhooks.NewWebhook(e["secret"].(string))
		require.NoError(t, err)
		require.NoError(t, wh.Verify(req.body, req.header), "signed with the endpoint's secret")
		require.Equal(t, m["webhookId"], req.header.Get(webhooks.HeaderID))
		var body map[string]any
		require.NoError(t, json.Unmarshal(req.body, &body))
		require.Equal(t, "webhook.test", body["type"])
		require.Equal(t, eid, body["data"].(map[string]any)["endpoint_id"])

		// The message list says it was delivered, once recorded.
		var status string
		for deadline := time.Now().Add(10 * time.Second); status != "succeeded" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			list := b.do(t, http.MethodGet, "/v1/webhook-messages?type=webhook.test", bearer(tok), nil)
			require.Equal(t, http.StatusOK, list.status, "%s", list.body)
			ms := list.json(t)["messages"].([]any)
			require.Len(t, ms, 1)
			ds := ms[0].(map[string]any)["deliveries"].([]any)
			require.Len(t, ds, 1)
			require.Equal(t, eid, ds[0].(map[string]any)["endpointId"])
			status = ds[0].(map[string]any)["status"].(string)
		}
		require.Equal(t, "succeeded", status)
		got2 := b.do(t, http.MethodGet, "/v1/webhook-endpoints/"+eid, bearer(tok), nil).json(t)
		require.NotEmpty(t, got2["health"].(map[string]any)["lastSuccessAt"])
	})

	t.Run("TestOfADisabledOrAnotherOrganizersEndpointIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setupWebhooks(t, true)
		tok, _ := b.organizerOf(t)
		intruder, _ := b.organizerOf(t)
		e := b.createEndpoint(t, tok, map[string]any{"url": "http://127.0.0.1:9/hook", "enabled": false})
		eid := e["id"].(string)
		res := b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+eid+"/test", bearer(tok), nil)
		require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
		res = b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+eid+"/test", bearer(intruder), nil)
		require.Equal(t, http.StatusNotFound, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeNotFound, problemType(t, res))
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_messages"))
	})

	t.Run("MessageListShowsAndFiltersDeliveryStatus", func(t *testing.T) {
		t.Parallel()
		b := setupWebhooks(t, true)
		tok, org := b.organizerOf(t)
		e := b.createEndpoint(t, tok, map[string]any{"url": "http://127.0.0.1:9/hook"})
		eid := e["id"].(string)
		ids := map[string]uuid.UUID{}
		for st, sql := range map[string]string{
			"succeeded": "status = 'succeeded', attempts = 1",
			"pending":   "attempts = 0",
			"failed":    "attempts = 1, last_error = 'timeout', next_attempt_at = now() + interval '1 hour'",
			"dead":      "status = 'dead', attempts = 8, last_error = 'http_5xx (status 500)'",
		} {
			ids[st] = storeMessage(t, b, org, webhooks.EventOrderPaid, time.Now())
			dbtest.Exec(t, b.pool, "UPDATE webhook_deliveries SET "+sql+" WHERE message_id = $1", ids[st])
		}
		for st, id := range ids {
			res := b.do(t, http.MethodGet, "/v1/webhook-messages?status="+st+"&endpointId="+eid, bearer(tok), nil)
			require.Equal(t, http.StatusOK, res.status, "%s", res.body)
			ms := res.json(t)["messages"].([]any)
			require.Len(t, ms, 1, st)
			m := ms[0].(map[string]any)
			require.Equal(t, id.String(), m["id"])
			d := m["deliveries"].([]any)[0].(map[string]any)
			require.Equal(t, st, d["status"])
			require.Equal(t, eid, d["endpointId"])
			switch st {
			case "failed":
				require.Equal(t, "timeout", d["lastError"])
				require.NotEmpty(t, d["nextAttemptAt"])
			case "succeeded":
				require.NotContains(t, d, "nextAttemptAt")
			}
		}
		all := b.do(t, http.MethodGet, "/v1/webhook-messages", bearer(tok), nil)
		require.Len(t, all.json(t)["messages"], 4, "no filter: every message")
		none := b.do(t, http.MethodGet, "/v1/webhook-messages?endpointId="+uuid.NewString(), bearer(tok), nil)
		require.Equal(t, http.StatusOK, none.status)
		require.Empty(t, none.json(t)["messages"])
		for _, bad := range []string{"?status=exploded", "?endpointId=nope"} {
			res := b.do(t, http.MethodGet, "/v1/webhook-messages"+bad, bearer(tok), nil)
			require.Equal(t, http.StatusUnprocessableEntity, res.status, "%s: %s", bad, res.body)
		}
	})

	t.Run("GetShowsHealth", func(t *testing.T) {
		t.Parallel()
		b := setupWebhooks(t, true)
		tok, _ := b.organizerOf(t)
		e := b.createEndpoint(t, tok, map[string]any{"url": "http://127.0.0.1:9/hook"})
		eid := e["id"].(string)
		h := e["health"].(map[string]any)
		require.Equal(t, "closed", h["breaker"])
		require.Equal(t, float64(0), h["failureStreak"])
		require.NotContains(t, h, "lastSuccessAt")

		dbtest.Exec(t, b.pool, `UPDATE webhook_endpoints SET consecutive_failures = 12, failing_since = now() - interval '1 hour',
			circuit_state = 'open', circuit_open_until = now() + interval '30 seconds', last_success_at = now() - interval '2 hours' WHERE id = $1`, eid)
		h = b.do(t, http.MethodGet, "/v1/webhook-endpoints/"+eid, bearer(tok), nil).json(t)["health"].(map[string]any)
		require.Equal(t, "open", h["breaker"])
		require.Equal(t, float64(12), h["failureStreak"])
		require.NotEmpty(t, h["breakerOpenUntil"])
		require.NotEmpty(t, h["lastSuccessAt"])
		require.NotEmpty(t, h["failingSince"])

		dbtest.Exec(t, b.pool, "UPDATE webhook_endpoints SET circuit_open_until = now() - interval '1 second' WHERE id = $1", eid)
		h = b.do(t, http.MethodGet, "/v1/webhook-endpoints/"+eid, bearer(tok), nil).json(t)["health"].(map[string]any)
		require.Equal(t, "half_open", h["breaker"])
		require.NotContains(t, h, "breakerOpenUntil")

		res := b.do(t, http.MethodPatch, "/v1/webhook-endpoints/"+eid, bearer(tok), map[string]any{"enabled": false})
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		h = res.json(t)["health"].(map[string]any)
		require.Equal(t, "user", h["disabledReason"])
		require.NotEmpty(t, h["disabledAt"])
		res = b.do(t, http.MethodPatch, "/v1/webhook-endpoints/"+eid, bearer(tok), map[string]any{"enabled": true})
		h = res.json(t)["health"].(map[string]any)
		require.NotContains(t, h, "disabledAt")
		require.Equal(t, "closed", h["breaker"], "enabling resets the breaker")
	})
}
