package webhooks

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"boxoffice/testkit/dbtest"
)

// tableDump is every endpoint row as text, as a database dump would show it.
func (b *testBundle) tableDump(t *testing.T) string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), "SELECT e::text FROM webhook_endpoints e")
	require.NoError(t, err)
	defer rows.Close()
	var out strings.Builder
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out.WriteString(s + "\n")
	}
	require.NoError(t, rows.Err())
	return out.String()
}

// storedSecret is an endpoint's secret column as stored.
func (b *testBundle) storedSecret(t *testing.T, id uuid.UUID) string {
	t.Helper()
	var s string
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT secret FROM webhook_endpoints WHERE id = $1", id).Scan(&s))
	return s
}

// waitRequest waits for the receiver's next request.
func waitRequest(t *testing.T, rc *receiver, what string) request {
	t.Helper()
	select {
	case r := <-rc.got:
		return r
	case <-time.After(10 * time.Second):
		require.FailNow(t, "timed out waiting for "+what)
		return request{}
	}
}

func TestSecretsAtRest(t *testing.T) {
	t.Parallel()

	t.Run("NotReadableInADump", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		e := b.endpoint(t, org, "http://127.0.0.1:9/hook", EndpointParams{})
		rotated, err := b.svc.RotateSecret(context.Background(), org, e.ID)
		require.NoError(t, err)
		b.remember(rotated.Secret)

		dump := b.tableDump(t)
		for _, s := range []string{e.Secret, rotated.Secret} {
			require.NotContains(t, dump, s)
			require.NotContains(t, dump, s[len(SecretPrefix):], "not even the key without its prefix")
		}
		require.NotContains(t, dump, SecretPrefix)
		require.True(t, strings.HasPrefix(b.storedSecret(t, e.ID), "v1:test:"))
		got, err := b.svc.Get(context.Background(), org, e.ID)
		require.NoError(t, err)
		require.Empty(t, got.Secret, "reads never return the secret")
	})
}

func TestSigningFailures(t *testing.T) {
	t.Parallel()

	// A stored secret that cannot be opened fails the attempt, counted by
	// reason, and no request is made. The test waits for the attempt's
	// record, which comes after where the request would have been sent.
	for _, tc := range []struct {
		name    string
		corrupt func(t *testing.T, b *testBundle, e, other Endpoint)
		reason  string
	}{
		{"CorruptedCiphertext", func(t *testing.T, b *testBundle, e, _ Endpoint) {
			s := []byte(b.storedSecret(t, e.ID))
			s[len(s)-5] ^= 1
			dbtest.Exec(t, b.pool, "UPDATE webhook_endpoints SET secret = $2 WHERE id = $1", e.ID, string(s))
		}, SecretDecryptFailed},
		{"SecretCopiedFromAnotherEndpoint", func(t *testing.T, b *testBundle, e, other Endpoint) {
			dbtest.Exec(t, b.pool, "UPDATE webhook_endpoints SET secret = (SELECT secret FROM webhook_endpoints WHERE id = $2) WHERE id = $1", e.ID, other.ID)
		}, SecretDecryptFailed},
		{"SealedUnderAKeyNoLongerConfigured", func(t *testing.T, b *testBundle, e, _ Endpoint) {
			sealed, err := mustKeyring("gone:"+keyOf(9)).Seal(e.ID, e.Secret)
			require.NoError(t, err)
			dbtest.Exec(t, b.pool, "UPDATE webhook_endpoints SET secret = $2 WHERE id = $1", e.ID, sealed)
		}, SecretUnknownKey},
	} {
		t.Run(tc.name+"FailsCountedAndSendsNothing", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			org := uuid.New()
			rc := newReceiver(t, status(http.StatusOK))
			e := b.endpoint(t, org, rc.URL, EndpointParams{})
			other := b.endpoint(t, uuid.New(), rc.URL+"/other", EndpointParams{})
			tc.corrupt(t, b, e, other)
			msg := b.message(t, org, EventOrderPaid)
			cfg := b.dispatcherConfig()
			cfg.RetrySchedule = []time.Duration{0}
			d, _ := b.run(t, cfg, nil)

			waitFor(t, 10*time.Second, "the attempt recorded", func() bool { return len(b.attempts(t, org, msg)) == 1 })
			a := b.attempts(t, org, msg)[0]
			require.Equal(t, ClassSecretInvalid, a.ErrorClass)
			require.Nil(t, a.StatusCode)
			require.Empty(t, rc.requests(), "nothing was sent")
			require.Equal(t, 1.0, value(t, d.metrics.signatureFailures.WithLabelValues(tc.reason)))
			require.Equal(t, StatusDead, b.delivery(t, msg).Status)
		})
	}
}

func TestSendTest(t *testing.T) {
	t.Parallel()

	t.Run("ArrivesSignedThroughThePipeline", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		rc := newReceiver(t, status(http.StatusNoContent))
		// The filter does not name webhook.test: a test goes anyway.
		e := b.endpoint(t, org, rc.URL, EndpointParams{EventTypes: []string{EventOrderPaid}})
		other := b.endpoint(t, org, newReceiver(t, status(http.StatusOK)).URL, EndpointParams{})
		b.run(t, b.dispatcherConfig(), nil)

		m, err := b.svc.SendTest(context.Background(), org, e.ID)
		require.NoError(t, err)
		req := waitRequest(t, rc, "the test delivery")
		wh, err := standardwebhooks.NewWebhook(e.Secret)
		require.NoError(t, err)
		require.NoError(t, wh.Verify(req.body, req.header), "signed with the endpoint's secret")
		require.Equal(t, MessageID(m.ID), req.header.Get(HeaderID))
		var body struct {
			Type string          `json:"type"`
			Data WebhookTestData `json:"data"`
		}
		require.NoError(t, json.Unmarshal(req.body, &body))
		require.Equal(t, EventWebhookTest, body.Type)
		require.Equal(t, e.ID, body.Data.EndpointID)

		waitFor(t, 5*time.Second, "the test delivery recorded", func() bool { return b.delivery(t, m.ID).Status == StatusSucceeded })
		ms, err := b.svc.Messages(context.Background(), org, MessageFilter{EventType: EventWebhookTest, Limit: 10})
		require.NoError(t, err)
		require.Len(t, ms, 1)
		require.Len(t, ms[0].Deliveries, 1, "to that endpoint only")
		require.Equal(t, e.ID, ms[0].Deliveries[0].EndpointID)
		require.NotEqual(t, other.ID, ms[0].Deliveries[0].EndpointID)
		require.Equal(t, DeliverySucceeded, ms[0].Deliveries[0].Status)
	})

	t.Run("RefusedForDisabledAndOtherOrganizersEndpoints", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		e := b.endpoint(t, org, "http://127.0.0.1:9/hook", EndpointParams{Disabled: true})
		_, err := b.svc.SendTest(context.Background(), org, e.ID)
		require.ErrorIs(t, err, ErrEndpointDisabled)
		_, err = b.svc.SendTest(context.Background(), uuid.New(), e.ID)
		require.ErrorIs(t, err, ErrNotFound)
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_messages"))
	})
}

func TestNotices(t *testing.T) {
	t.Parallel()

	// An endpoint the dispatcher disables makes one endpoint.disabled
	// notice, to the same organizer's endpoints that subscribe to it, and
	// to no one else: not itself, not an endpoint whose filter is empty,
	// and never another organizer's subscribed endpoint.
	t.Run("DisabledEndpointNoticesItsOrganizersSubscribersOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org, stranger := uuid.New(), uuid.New()
		gone := b.endpoint(t, org, newReceiver(t, status(http.StatusGone)).URL, EndpointParams{MaxConcurrency: 1})
		ops := newReceiver(t, status(http.StatusOK))
		opsEndpoint := b.endpoint(t, org, ops.URL, EndpointParams{EventTypes: []string{EventEndpointDisabled}})
		everything := b.endpoint(t, org, newReceiver(t, status(http.StatusOK)).URL+"/all", EndpointParams{})
		theirs := newReceiver(t, status(http.StatusOK))
		b.endpoint(t, stranger, theirs.URL, EndpointParams{EventTypes: []string{EventEndpointDisabled}})
		b.message(t, org, EventOrderPaid)
		b.message(t, org, EventOrderPaid)
		b.run(t, b.dispatcherConfig(), nil)

		req := waitRequest(t, ops, "the endpoint.disabled notice")
		wh, err := standardwebhooks.NewWebhook(opsEndpoint.Secret)
		require.NoError(t, err)
		require.NoError(t, wh.Verify(req.body, req.header))
		var body struct {
			Type string               `json:"type"`
			Data EndpointDisabledData `json:"data"`
		}
		require.NoError(t, json.Unmarshal(req.body, &body))
		require.Equal(t, EventEndpointDisabled, body.Type)
		require.Equal(t, gone.ID, body.Data.EndpointID)
		require.Equal(t, DisabledGone, body.Data.Reason)
		require.NotContains(t, string(req.body), gone.URL, "the disabled endpoint's URL is not passed on")

		got, err := b.svc.Get(context.Background(), org, gone.ID)
		require.NoError(t, err)
		require.NotNil(t, got.DisabledAt)
		require.Equal(t, got.DisabledAt.UTC().Truncate(time.Microsecond), body.Data.DisabledAt.Truncate(time.Microsecond))

		// The notice was written with the disabling: it is all there now.
		require.Equal(t, int64(1), dbtest.Count(t, b.pool,
			"SELECT count(*) FROM webhook_messages WHERE organizer_id = $1 AND event_type = 'endpoint.disabled'", org), "one notice per disabling")
		require.Equal(t, int64(1), dbtest.Count(t, b.pool,
			`SELECT count(*) FROM webhook_deliveries d JOIN webhook_messages m ON m.id = d.message_id
			 WHERE m.event_type = 'endpoint.disabled' AND d.organizer_id = $1`, org), "to the subscriber only")
		require.Zero(t, dbtest.Count(t, b.pool,
			`SELECT count(*) FROM webhook_deliveries d JOIN webhook_messages m ON m.id = d.message_id
			 WHERE m.event_type = 'endpoint.disabled' AND d.endpoint_id = ANY($1)`, []uuid.UUID{gone.ID, everything.ID}))
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_messages WHERE organizer_id = $1", stranger),
			"nothing for another organizer")
		require.Empty(t, theirs.requests())
	})

	t.Run("ExhaustedDeliveryNoticesOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		failing := b.endpoint(t, org, newReceiver(t, status(http.StatusInternalServerError)).URL, EndpointParams{EventTypes: []string{EventOrderPaid}})
		ops := newReceiver(t, status(http.StatusOK))
		b.endpoint(t, org, ops.URL, EndpointParams{EventTypes: []string{EventDeliveryExhausted, EventEndpointDisabled}})
		msg := b.message(t, org, EventOrderPaid)
		cfg := b.dispatcherConfig()
		cfg.RetrySchedule = []time.Duration{0, 20 * time.Millisecond}
		b.run(t, cfg, nil)

		req := waitRequest(t, ops, "the delivery.exhausted notice")
		var body struct {
			Type string                `json:"type"`
			Data DeliveryExhaustedData `json:"data"`
		}
		require.NoError(t, json.Unmarshal(req.body, &body))
		require.Equal(t, EventDeliveryExhausted, body.Type)
		require.Equal(t, DeliveryExhaustedData{
			EndpointID: failing.ID, MessageID: MessageID(msg), EventType: EventOrderPaid, Attempts: 2, LastError: "http_5xx (status 500)",
		}, body.Data)
		require.Equal(t, int64(1), dbtest.Count(t, b.pool,
			"SELECT count(*) FROM webhook_messages WHERE organizer_id = $1 AND event_type = 'delivery.exhausted'", org))
	})
}

func TestDuplicateDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org := uuid.New()
	rc := newReceiver(t, status(http.StatusOK))
	b.endpoint(t, org, rc.URL, EndpointParams{})
	msg := b.message(t, org, EventOrderPaid)
	d, _ := b.run(t, b.dispatcherConfig(), nil)
	waitFor(t, 5*time.Second, "success", func() bool { return b.delivery(t, msg).Status == StatusSucceeded })
	waitFor(t, 5*time.Second, "the attempt counted", func() bool { return value(t, d.metrics.attempts.WithLabelValues(ClassNone, TriggerOriginal)) == 1 })
	require.Zero(t, value(t, d.metrics.duplicates), "a first delivery is no duplicate")

	_, err := b.svc.Replay(context.Background(), org, msg, ReplayParams{})
	require.NoError(t, err)
	waitFor(t, 5*time.Second, "the replay counted", func() bool { return value(t, d.metrics.attempts.WithLabelValues(ClassNone, TriggerReplay)) == 1 })
	require.Equal(t, 1.0, value(t, d.metrics.duplicates), "the same webhook-id again after a success")
}

func TestMessageDeliveryStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org := uuid.New()
	e := b.endpoint(t, org, "http://127.0.0.1:9/a", EndpointParams{})
	other := b.endpoint(t, org, "http://127.0.0.1:9/b", EndpointParams{})
	set := func(msg uuid.UUID, sql string) {
		dbtest.Exec(t, b.pool, "UPDATE webhook_deliveries SET "+sql+" WHERE message_id = $1 AND endpoint_id = $2", msg, e.ID)
	}
	want := map[string]uuid.UUID{}
	want[DeliverySucceeded] = b.message(t, org, EventOrderPaid)
	set(want[DeliverySucceeded], "status = 'succeeded', attempts = 1")
	want[DeliveryPending] = b.message(t, org, EventOrderPaid)
	set(want[DeliveryPending], "next_attempt_at = now() + interval '1 hour'")
	want[DeliveryFailed] = b.message(t, org, EventOrderPaid)
	set(want[DeliveryFailed], "attempts = 2, last_error = 'http_5xx (status 503)', next_attempt_at = now() + interval '1 hour'")
	stopped := b.message(t, org, EventOrderPaid) // stopped because the endpoint was disabled
	set(stopped, "status = 'failed', attempts = 1, last_error = 'endpoint disabled'")
	want[DeliveryNeedsReview] = b.message(t, org, EventOrderPaid)
	set(want[DeliveryNeedsReview], "status = 'needs_review', attempts = 1, last_error = 'http_4xx (status 400)'")
	want[DeliveryDead] = b.message(t, org, EventOrderPaid)
	set(want[DeliveryDead], "status = 'dead', attempts = 8")
	// The other endpoint's deliveries are all pending (never attempted).
	dbtest.Exec(t, b.pool, "UPDATE webhook_deliveries SET next_attempt_at = now() + interval '1 hour' WHERE endpoint_id = $1", other.ID)

	for _, st := range DeliveryStatuses {
		ms, err := b.svc.Messages(context.Background(), org, MessageFilter{Status: st, EndpointID: &e.ID, Limit: 50})
		require.NoError(t, err)
		var ids []uuid.UUID
		for _, m := range ms {
			ids = append(ids, m.ID)
			require.Len(t, m.Deliveries, 2, "every endpoint's delivery is shown")
			for _, d := range m.Deliveries {
				if d.EndpointID == e.ID {
					require.Equal(t, st, d.Status)
				} else {
					require.Equal(t, DeliveryPending, d.Status)
				}
			}
		}
		switch st {
		case DeliveryDead:
			require.ElementsMatch(t, []uuid.UUID{want[DeliveryDead], stopped}, ids, "dead: exhausted, gone, or stopped by disabling")
		default:
			require.Equal(t, []uuid.UUID{want[st]}, ids, st)
		}
	}
	ms, err := b.svc.Messages(context.Background(), org, MessageFilter{Status: DeliveryPending, Limit: 50})
	require.NoError(t, err)
	require.Len(t, ms, 6, "without an endpoint, any endpoint's delivery counts")
	ms, err = b.svc.Messages(context.Background(), org, MessageFilter{Status: DeliveryFailed, Limit: 50})
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Equal(t, "http_5xx (status 503)", deliveryTo(ms[0], e.ID).LastError)
	require.NotNil(t, deliveryTo(ms[0], e.ID).NextAttemptAt)
}

func deliveryTo(m Message, endpoint uuid.UUID) MessageDelivery {
	for _, d := range m.Deliveries {
		if d.EndpointID == endpoint {
			return d
		}
	}
	return MessageDelivery{}
}

func TestResealer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	oldKeys := mustKeyring("old:" + keyOf(2))
	svc := NewService(b.pool, ServiceConfig{Guard: &Guard{AllowPrivate: true}, Keys: oldKeys, Logger: b.logger})
	org := uuid.New()
	var ids []uuid.UUID
	var secrets []string
	for i := range 5 {
		e, err := svc.Create(ctx, org, EndpointParams{URL: "http://127.0.0.1:9/" + string(rune('a'+i))})
		require.NoError(t, err)
		b.remember(e.Secret)
		ids, secrets = append(ids, e.ID), append(secrets, e.Secret)
	}
	rotated, err := svc.RotateSecret(ctx, org, ids[0])
	require.NoError(t, err)
	b.remember(rotated.Secret)
	// A row from before secrets were sealed, and one no key opens.
	legacy, err := NewSecret()
	require.NoError(t, err)
	b.remember(legacy)
	legacyID, brokenID := uuid.New(), uuid.New()
	dbtest.Exec(t, b.pool, "INSERT INTO webhook_endpoints (id, organizer_id, url, secret) VALUES ($1, $2, 'http://127.0.0.1:9/l', $3)", legacyID, org, legacy)
	dbtest.Exec(t, b.pool, "INSERT INTO webhook_endpoints (id, organizer_id, url, secret) VALUES ($1, $2, 'http://127.0.0.1:9/x', 'v1:old:broken')", brokenID, org)

	keys := mustKeyring("new:" + keyOf(1) + ",old:" + keyOf(2))
	r, err := NewResealer(b.pool, ResealerConfig{Keys: keys, BatchSize: 2, Logger: b.logger, Registerer: b.reg})
	require.NoError(t, err)
	changed, unreadable, err := r.Pass(ctx)
	require.NoError(t, err)
	require.Equal(t, 6, changed)
	require.Equal(t, 1, unreadable)
	require.Equal(t, 1.0, value(t, r.unreadable))

	for i, id := range append(ids, legacyID) {
		stored := b.storedSecret(t, id)
		require.True(t, strings.HasPrefix(stored, "v1:new:"), stored)
		plain, err := keys.Open(id, stored)
		require.NoError(t, err)
		want := legacy
		switch {
		case i == 0:
			want = rotated.Secret
		case i < len(ids):
			want = secrets[i]
		}
		require.Equal(t, want, plain, "the same secret, sealed anew")
	}
	var prev string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT previous_secret FROM webhook_endpoints WHERE id = $1", ids[0]).Scan(&prev))
	require.True(t, strings.HasPrefix(prev, "v1:new:"), "the previous secret too, while it signs")
	plain, err := keys.Open(ids[0], prev)
	require.NoError(t, err)
	require.Equal(t, secrets[0], plain)
	require.Equal(t, "v1:old:broken", b.storedSecret(t, brokenID), "what cannot be opened is left alone")
	require.NotContains(t, b.tableDump(t), legacy)

	changed, unreadable, err = r.Pass(ctx)
	require.NoError(t, err)
	require.Zero(t, changed, "a second pass has nothing to do")
	require.Equal(t, 1, unreadable)
}
