package handlers_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"boxoffice/domain/webhooks"
	"boxoffice/handlers"
	"boxoffice/platform/apikey"
	"boxoffice/testkit/dbtest"
)

// setupIdempotent is the API with API keys and webhooks on the test's
// database: every creating POST that takes an Idempotency-Key.
func setupIdempotent(t *testing.T) *testBundle {
	t.Helper()
	pool := dbtest.New(t)
	return setupPool(t, pool, func(cfg *handlers.Config) {
		c := cellOf(cfg)
		c.APIKeys = apikey.NewStore(pool)
		c.Webhooks = webhooks.NewService(pool, webhooks.ServiceConfig{
			Guard: &webhooks.Guard{AllowPrivate: true}, Keys: testWebhookKeys, Logger: cfg.Logger,
		})
	})
}

// The creating POSTs other than holds take an optional Idempotency-Key
// with the holds' semantics: a retry with the same key and body gets the
// first answer (a secret it showed included) and nothing is done twice,
// even when the retries run at once; the same key with another body is 409
// idempotency-conflict; secrets kept for retries are sealed.
func TestCreatingPostsAreIdempotent(t *testing.T) {
	t.Parallel()

	eventBody := func(name string) map[string]any {
		return map[string]any{
			"name": name, "startsAt": "2027-06-01T19:30:00Z", "currency": "eur",
			"sections": []map[string]any{{"name": "Floor", "rows": 2, "seatsPerRow": 5, "priceMinor": 5000}},
		}
	}
	with := func(tok, key string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + tok, "Idempotency-Key": key}
	}

	// once sends the same request from several goroutines at once and
	// requires one answer for all.
	once := func(t *testing.T, b *testBundle, path string, headers map[string]string, body any, status int) response {
		t.Helper()
		const twins = 6
		res := make([]response, twins)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range twins {
			wg.Go(func() {
				<-start
				res[i] = b.do(t, http.MethodPost, path, headers, body)
			})
		}
		close(start)
		wg.Wait()
		for i := range twins {
			require.Equal(t, status, res[i].status, "%s", res[i].body)
			require.JSONEq(t, string(res[0].body), string(res[i].body))
			require.Equal(t, res[0].header.Get("Location"), res[i].header.Get("Location"))
		}
		return res[0]
	}

	t.Run("CreateEventConcurrentRetriesCreateOne", func(t *testing.T) {
		t.Parallel()
		b := setupIdempotent(t)
		org := b.organizer(t)
		first := once(t, b, "/v1/events", with(org, "ev-1"), eventBody("Night"), http.StatusCreated)
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM events"))
		require.EqualValues(t, 10, dbtest.Count(t, b.pool, "SELECT count(*) FROM seats"))
		again := b.do(t, http.MethodPost, "/v1/events", with(org, "ev-1"), eventBody("Night"))
		require.Equal(t, http.StatusCreated, again.status, "%s", again.body)
		require.JSONEq(t, string(first.body), string(again.body))

		res := b.do(t, http.MethodPost, "/v1/events", with(org, "ev-1"), eventBody("Another night"))
		require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeIdempotencyConflict, problemType(t, res))
		// Without a key, every request creates: the header is optional.
		for range 2 {
			require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/v1/events", bearer(org), eventBody("Night")).status)
		}
		// Keys are per organizer.
		require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, "/v1/events", with(b.organizer(t), "ev-1"), eventBody("Night")).status)
		require.EqualValues(t, 4, dbtest.Count(t, b.pool, "SELECT count(*) FROM events"))
	})

	t.Run("AFailedCreateBindsNoKey", func(t *testing.T) {
		t.Parallel()
		b := setupIdempotent(t)
		org := b.organizer(t)
		bad := eventBody("Night")
		bad["sections"] = []map[string]any{{"name": "A", "rows": 1, "seatsPerRow": 1, "priceMinor": 1}, {"name": "A", "rows": 1, "seatsPerRow": 1, "priceMinor": 1}}
		res := b.do(t, http.MethodPost, "/v1/events", with(org, "ev-1"), bad)
		require.Equal(t, http.StatusUnprocessableEntity, res.status, "%s", res.body)
		res = b.do(t, http.MethodPost, "/v1/events", with(org, "ev-1"), eventBody("Night"))
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	})

	t.Run("WebhookEndpointRetryGetsTheSameSecret", func(t *testing.T) {
		t.Parallel()
		b := setupIdempotent(t)
		org, _ := b.organizerOf(t)
		body := map[string]any{"url": "http://127.0.0.1:9/hook"}
		first := once(t, b, "/v1/webhook-endpoints", with(org, "wh-1"), body, http.StatusCreated)
		secret := b.remember(first.json(t)["secret"].(string))
		require.True(t, strings.HasPrefix(secret, "whsec_"))
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_endpoints"))
		// The answer kept for retries is sealed: the secret is nowhere in clear.
		require.EqualValues(t, 1, dbtest.Count(t, b.pool,
			"SELECT count(*) FROM idempotent_requests WHERE sealed AND position(convert_to($1, 'UTF8') in response) = 0", secret))

		res := b.do(t, http.MethodPost, "/v1/webhook-endpoints", with(org, "wh-1"), map[string]any{"url": "http://127.0.0.1:10/hook"})
		require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeIdempotencyConflict, problemType(t, res))

		// Rotation: retried, one rotation and one new secret.
		path := "/v1/webhook-endpoints/" + first.json(t)["id"].(string) + "/rotate-secret"
		rotated := once(t, b, path, with(org, "rot-1"), nil, http.StatusOK)
		newSecret := b.remember(rotated.json(t)["secret"].(string))
		require.NotEqual(t, secret, newSecret)
		again := b.do(t, http.MethodPost, path, with(org, "rot-1"), nil)
		require.JSONEq(t, string(rotated.body), string(again.body))
		// The endpoint's old secret is the first one: it rotated once.
		rotatedTwice := b.do(t, http.MethodPost, path, with(org, "rot-2"), nil)
		require.Equal(t, http.StatusOK, rotatedTwice.status, "%s", rotatedTwice.body)
		b.remember(rotatedTwice.json(t)["secret"].(string))
		require.NotEqual(t, newSecret, rotatedTwice.json(t)["secret"])
		// The rotate key on another endpoint's path is another request.
		res = b.do(t, http.MethodPost, "/v1/webhook-endpoints/"+b.createEndpoint(t, org, map[string]any{"url": "http://127.0.0.1:11/hook"})["id"].(string)+"/rotate-secret", with(org, "rot-1"), nil)
		require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	})

	t.Run("WebhookToolingRetriesQueueOnce", func(t *testing.T) {
		t.Parallel()
		b := setupIdempotent(t)
		org, _ := b.organizerOf(t)
		endpoint := b.createEndpoint(t, org, map[string]any{"url": "http://127.0.0.1:9/hook"})["id"].(string)
		test := once(t, b, "/v1/webhook-endpoints/"+endpoint+"/test", with(org, "test-1"), nil, http.StatusAccepted)
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_messages"), "one test message for all the retries")
		msg := test.json(t)["id"].(string)
		once(t, b, "/v1/webhook-messages/"+msg+"/replay", with(org, "replay-1"), map[string]any{}, http.StatusAccepted)
		res := b.do(t, http.MethodPost, "/v1/webhook-messages/"+msg+"/replay", with(org, "replay-1"), map[string]any{"endpointId": endpoint})
		require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeIdempotencyConflict, problemType(t, res))
		once(t, b, "/v1/webhook-endpoints/"+endpoint+"/recover", with(org, "recover-1"), map[string]any{"since": "2026-01-01T00:00:00Z"}, http.StatusAccepted)
	})

	t.Run("APIKeyRetryGetsTheSameWorkingKey", func(t *testing.T) {
		t.Parallel()
		b := setupIdempotent(t)
		org := b.organizer(t)
		first := once(t, b, "/v1/api-keys", with(org, "ak-1"), map[string]any{"name": "sync"}, http.StatusCreated)
		key := b.remember(first.json(t)["key"].(string))
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM api_keys"))
		require.EqualValues(t, 1, dbtest.Count(t, b.pool,
			"SELECT count(*) FROM idempotent_requests WHERE sealed AND position(convert_to($1, 'UTF8') in response) = 0", key))
		// The replayed key is the one that works.
		res := b.do(t, http.MethodGet, "/v1/api-keys", bearer(org), nil)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		res = b.do(t, http.MethodPost, "/v1/events", bearer(key), eventBody("By key"))
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)

		res = b.do(t, http.MethodPost, "/v1/api-keys", with(org, "ak-1"), map[string]any{"name": "other"})
		require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeIdempotencyConflict, problemType(t, res))
	})
}
