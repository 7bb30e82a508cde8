package webhooks

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"boxoffice/testkit/dbtest"
)

func TestDispatcher(t *testing.T) {
	t.Parallel()

	t.Run("FailsTwiceThenSucceedsWithGrowingGaps", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n <= 2 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		b.endpoint(t, org, rc.URL, EndpointParams{})
		msg := b.message(t, org, EventOrderPaid)
		b.run(t, b.dispatcherConfig(), nil)

		waitFor(t, 10*time.Second, "success", func() bool { return b.delivery(t, msg).Status == StatusSucceeded })
		reqs := rc.requests()
		require.Len(t, reqs, 3)
		gap1, gap2 := reqs[1].at.Sub(reqs[0].at), reqs[2].at.Sub(reqs[1].at)
		t.Logf("gaps between attempts: %v, %v", gap1, gap2)
		require.Greater(t, gap2, gap1, "gaps must grow")
		require.GreaterOrEqual(t, gap1, 80*time.Millisecond, "the second attempt waits the schedule's 100ms (-20%% jitter)")
		require.GreaterOrEqual(t, gap2, 320*time.Millisecond, "the third waits 400ms (-20%% jitter)")
		for _, r := range reqs {
			require.Equal(t, MessageID(msg), r.header.Get(HeaderID), "every attempt carries the same webhook-id")
		}
		a := b.attempts(t, org, msg)
		require.Len(t, a, 3)
		for i, want := range []struct {
			trigger string
			code    int32
			class   string
		}{{TriggerOriginal, 503, ClassHTTP5xx}, {TriggerRetry, 503, ClassHTTP5xx}, {TriggerRetry, 200, ClassNone}} {
			require.Equal(t, int32(i+1), a[i].Number)
			require.Equal(t, want.trigger, a[i].Trigger)
			require.Equal(t, want.code, *a[i].StatusCode)
			require.Equal(t, want.class, a[i].ErrorClass)
		}
		require.Equal(t, deliveryRow{StatusSucceeded, 3}, b.delivery(t, msg))
	})

	t.Run("BadRequestIsOneAttemptAndNeedsReview", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":"unsupported event"}`))
		})
		b.endpoint(t, org, rc.URL, EndpointParams{})
		msg := b.message(t, org, EventOrderPaid)
		b.run(t, b.dispatcherConfig(), nil)

		waitFor(t, 5*time.Second, "needs review", func() bool { return b.delivery(t, msg).Status == StatusNeedsReview })
		// A retry would come after 100ms: a canary due 300ms from now is
		// delivered only once the dispatcher has claimed past that.
		b.canary(t, 300*time.Millisecond)()
		require.Len(t, rc.requests(), 1)
		a := b.attempts(t, org, msg)
		require.Len(t, a, 1)
		require.Equal(t, ClassHTTP4xx, a[0].ErrorClass)
		require.Equal(t, `{"error":"unsupported event"}`, a[0].ResponseBody)
	})

	t.Run("GoneDisablesEndpointAndKeepsDeliveries", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		rc := newReceiver(t, status(http.StatusGone))
		e := b.endpoint(t, org, rc.URL, EndpointParams{MaxConcurrency: 1})
		first := b.message(t, org, EventOrderPaid)
		second := b.message(t, org, EventOrderPaid)
		b.run(t, b.dispatcherConfig(), nil)

		waitFor(t, 5*time.Second, "endpoint disabled", func() bool {
			got, err := b.svc.Get(context.Background(), org, e.ID)
			require.NoError(t, err)
			return !got.Enabled
		})
		got, err := b.svc.Get(context.Background(), org, e.ID)
		require.NoError(t, err)
		require.Equal(t, DisabledGone, got.DisabledReason)
		waitFor(t, 5*time.Second, "both deliveries stopped", func() bool {
			s1, s2 := b.delivery(t, first).Status, b.delivery(t, second).Status
			return s1 != StatusPending && s2 != StatusPending
		})
		require.Len(t, rc.requests(), 1, "nothing more is sent to a gone endpoint")
		// One delivery died of the 410; the other is kept as failed for recover.
		statuses := []string{b.delivery(t, first).Status, b.delivery(t, second).Status}
		require.ElementsMatch(t, []string{StatusDead, StatusFailed}, statuses)
	})

	t.Run("HangingReceiverTimesOutAndIsRetried", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) {
			if n == 1 {
				select {
				case <-release:
				case <-r.Context().Done():
				}
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
		b.endpoint(t, org, rc.URL, EndpointParams{})
		msg := b.message(t, org, EventOrderPaid)
		cfg := b.dispatcherConfig()
		cfg.Timeout = 300 * time.Millisecond
		cfg.Lease = 2 * time.Second
		b.run(t, cfg, nil)

		waitFor(t, 10*time.Second, "success", func() bool { return b.delivery(t, msg).Status == StatusSucceeded })
		a := b.attempts(t, org, msg)
		require.Len(t, a, 2)
		require.Equal(t, ClassTimeout, a[0].ErrorClass)
		require.Nil(t, a[0].StatusCode)
		require.GreaterOrEqual(t, a[0].LatencyMs, int32(290))
		require.Equal(t, TriggerRetry, a[1].Trigger)
		require.Equal(t, ClassNone, a[1].ErrorClass)
	})

	t.Run("RetryAfterIsHonoured", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 1 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		b.endpoint(t, org, rc.URL, EndpointParams{})
		msg := b.message(t, org, EventOrderPaid)
		b.run(t, b.dispatcherConfig(), nil)

		waitFor(t, 10*time.Second, "success", func() bool { return b.delivery(t, msg).Status == StatusSucceeded })
		reqs := rc.requests()
		require.Len(t, reqs, 2)
		require.GreaterOrEqual(t, reqs[1].at.Sub(reqs[0].at), time.Second, "Retry-After: 1 beats the schedule's 100ms")
		require.Equal(t, ClassHTTP429, b.attempts(t, org, msg)[0].ErrorClass)
	})

	t.Run("ExhaustedRetriesAreDead", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		rc := newReceiver(t, status(http.StatusInternalServerError))
		b.endpoint(t, org, rc.URL, EndpointParams{})
		msg := b.message(t, org, EventOrderPaid)
		cfg := b.dispatcherConfig()
		cfg.RetrySchedule = []time.Duration{0, 20 * time.Millisecond, 40 * time.Millisecond}
		b.run(t, cfg, nil)

		waitFor(t, 10*time.Second, "dead", func() bool { return b.delivery(t, msg).Status == StatusDead })
		require.Len(t, rc.requests(), 3)
		require.Equal(t, deliveryRow{StatusDead, 3}, b.delivery(t, msg))
	})

	// An endpoint whose secret cannot sign is never sent a delivery,
	// unsigned or signed with its previous secret alone: each attempt fails
	// as secret_invalid, and the delivery dies on its schedule.
	t.Run("AnUnusableSecretIsNeverSentUnsigned", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		rc := newReceiver(t, status(http.StatusOK))
		e := b.endpoint(t, org, rc.URL, EndpointParams{})
		dbtest.Exec(t, b.pool, "UPDATE webhook_endpoints SET secret = 'whsec_not base64!' WHERE id = $1", e.ID)
		msg := b.message(t, org, EventOrderPaid)
		cfg := b.dispatcherConfig()
		cfg.RetrySchedule = []time.Duration{0, 20 * time.Millisecond}
		b.run(t, cfg, nil)

		waitFor(t, 10*time.Second, "dead", func() bool { return b.delivery(t, msg).Status == StatusDead })
		require.Empty(t, rc.requests(), "nothing was sent")
		a := b.attempts(t, org, msg)
		require.Len(t, a, 2)
		for _, at := range a {
			require.Equal(t, ClassSecretInvalid, at.ErrorClass)
			require.Nil(t, at.StatusCode)
		}
	})

	t.Run("ReplayKeepsWebhookIDAndRecordsReplay", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 1 {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		b.endpoint(t, org, rc.URL, EndpointParams{})
		msg := b.message(t, org, EventTicketIssued)
		b.run(t, b.dispatcherConfig(), nil)
		waitFor(t, 10*time.Second, "success", func() bool { return b.delivery(t, msg).Status == StatusSucceeded })

		n, err := b.svc.Replay(context.Background(), org, msg, ReplayParams{})
		require.NoError(t, err)
		require.Equal(t, int64(1), n)
		waitFor(t, 10*time.Second, "replay", func() bool { return len(b.attempts(t, org, msg)) == 3 })

		a := b.attempts(t, org, msg)
		require.Equal(t, []string{TriggerOriginal, TriggerRetry, TriggerReplay}, []string{a[0].Trigger, a[1].Trigger, a[2].Trigger})
		reqs := rc.requests()
		require.Len(t, reqs, 3)
		for _, r := range reqs {
			require.Equal(t, MessageID(msg), r.header.Get(HeaderID))
			require.Equal(t, reqs[0].body, r.body, "a replay sends the same bytes")
		}
	})

	t.Run("CrashAfterReceiverAnsweredSendsDuplicateNeverLoses", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		rc := newReceiver(t, status(http.StatusOK))
		b.endpoint(t, org, rc.URL, EndpointParams{})
		msg := b.message(t, org, EventOrderPaid)

		cfg := b.dispatcherConfig()
		cfg.Timeout, cfg.Lease = 200*time.Millisecond, 700*time.Millisecond
		cfg.ID = "doomed"
		crashed := make(chan struct{})
		var once sync.Once
		_, cancel := b.run(t, cfg, func(r *result) bool {
			// The receiver answered 200; the dispatcher "dies" before
			// recording it.
			once.Do(func() { close(crashed) })
			return true
		})
		select {
		case <-crashed:
		case <-time.After(5 * time.Second):
			require.FailNow(t, "no attempt was made")
		}
		cancel()
		require.Len(t, rc.requests(), 1)
		require.Empty(t, b.attempts(t, org, msg), "the attempt was never recorded")

		cfg.ID = "survivor"
		b.run(t, cfg, nil)
		waitFor(t, 10*time.Second, "redelivery", func() bool { return b.delivery(t, msg).Status == StatusSucceeded })
		reqs := rc.requests()
		require.Len(t, reqs, 2, "the receiver gets a duplicate")
		require.Equal(t, reqs[0].header.Get(HeaderID), reqs[1].header.Get(HeaderID), "with the same webhook-id")
		require.Equal(t, reqs[0].body, reqs[1].body)
		require.Len(t, b.attempts(t, org, msg), 1)
	})

	t.Run("SignaturesVerifyWithTheOfficialLibraryThroughRotation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		rc := newReceiver(t, status(http.StatusOK))
		e := b.endpoint(t, org, rc.URL, EndpointParams{})
		first := b.message(t, org, EventOrderPaid)
		b.run(t, b.dispatcherConfig(), nil)
		waitFor(t, 5*time.Second, "first", func() bool { return b.delivery(t, first).Status == StatusSucceeded })

		rotated, err := b.svc.RotateSecret(context.Background(), org, e.ID)
		require.NoError(t, err)
		b.remember(rotated.Secret)
		require.NotEqual(t, e.Secret, rotated.Secret)
		second := b.message(t, org, EventOrderPaid)
		waitFor(t, 5*time.Second, "second", func() bool { return b.delivery(t, second).Status == StatusSucceeded })

		reqs := rc.requests()
		require.Len(t, reqs, 2)
		oldWH, err := standardwebhooks.NewWebhook(e.Secret)
		require.NoError(t, err)
		newWH, err := standardwebhooks.NewWebhook(rotated.Secret)
		require.NoError(t, err)
		require.NoError(t, oldWH.Verify(reqs[0].body, reqs[0].header))
		require.Error(t, newWH.Verify(reqs[0].body, reqs[0].header), "the new secret did not sign before rotation")
		require.Len(t, splitSigs(reqs[1].header.Get(HeaderSignature)), 2, "both signatures during the overlap")
		require.NoError(t, oldWH.Verify(reqs[1].body, reqs[1].header), "the old secret still signs for 24h")
		require.NoError(t, newWH.Verify(reqs[1].body, reqs[1].header))

		// Past the overlap only the new secret signs.
		_, err = b.pool.Exec(context.Background(), "UPDATE webhook_endpoints SET previous_secret_expires_at = now() - interval '1s' WHERE id = $1", e.ID)
		require.NoError(t, err)
		third := b.message(t, org, EventOrderPaid)
		waitFor(t, 5*time.Second, "third", func() bool { return b.delivery(t, third).Status == StatusSucceeded })
		r3 := rc.requests()[2]
		require.Len(t, splitSigs(r3.header.Get(HeaderSignature)), 1)
		require.Error(t, oldWH.Verify(r3.body, r3.header))
		require.NoError(t, newWH.Verify(r3.body, r3.header))
	})

	t.Run("CircuitOpensAfterSustainedFailureThenProbes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		var failing atomic.Bool
		failing.Store(true)
		rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			if failing.Load() {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			w.WriteHeader(http.StatusOK)
		})
		e := b.endpoint(t, org, rc.URL, EndpointParams{MaxConcurrency: 1})
		var msgs []uuid.UUID
		for range 10 {
			msgs = append(msgs, b.message(t, org, EventOrderPaid))
		}
		cfg := b.dispatcherConfig()
		cfg.CircuitThreshold = 3
		cfg.CircuitCooldown = 2 * time.Second // well beyond the quiet window below, even on a loaded machine
		cfg.RetrySchedule = []time.Duration{0, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}
		d, _ := b.run(t, cfg, nil)

		waitFor(t, 5*time.Second, "circuit open", func() bool {
			got, err := b.svc.Get(context.Background(), org, e.ID)
			require.NoError(t, err)
			return got.CircuitState == "open"
		})
		// An attempt claimed before the circuit opened may still land:
		// wait until none is in flight and the dispatcher has put every
		// pending delivery back until the circuit's cooldown ends.
		waitFor(t, 5*time.Second, "the open circuit's deliveries put back", func() bool {
			d.mu.Lock()
			inflight := d.inflight
			d.mu.Unlock()
			return inflight == 0 && dbtest.Count(t, b.pool, `SELECT count(*) FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
				WHERE d.endpoint_id = $1 AND d.status = 'pending' AND (d.lease_expires_at IS NOT NULL OR d.next_attempt_at < e.circuit_open_until)`, e.ID) == 0
		})
		var openUntil time.Time
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT circuit_open_until FROM webhook_endpoints WHERE id = $1", e.ID).Scan(&openUntil))
		n := len(rc.requests())
		// A canary due 500ms from now is delivered once the dispatcher has
		// claimed through those 500ms of open circuit. On a loaded machine
		// the cooldown may end first and a probe go out: that one is
		// allowed, a request before the cooldown's end is not.
		b.canary(t, 500*time.Millisecond)()
		for _, r := range rc.requests()[n:] {
			require.False(t, r.at.Before(openUntil.Add(-time.Millisecond)), "nothing is sent while the circuit is open: a request at %s, the circuit open until %s", r.at, openUntil)
		}
		failing.Store(false)
		waitFor(t, 10*time.Second, "all delivered after the probe closed the circuit", func() bool {
			for _, m := range msgs {
				if b.delivery(t, m).Status != StatusSucceeded {
					return false
				}
			}
			return true
		})
		got, err := b.svc.Get(context.Background(), org, e.ID)
		require.NoError(t, err)
		require.Equal(t, "closed", got.CircuitState)
		// Throttling used no attempts: no delivery took more attempts than
		// the failures it saw plus one.
		var total int64
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT sum(attempts) FROM webhook_deliveries WHERE endpoint_id = $1", e.ID).Scan(&total)) // not the canary's
		require.Equal(t, int64(len(rc.requests())), total, "one attempt per request, none for throttling")
	})

	t.Run("RateLimitThrottlesWithoutUsingAttempts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		rc := newReceiver(t, status(http.StatusOK))
		rate := int32(20)
		b.endpoint(t, org, rc.URL, EndpointParams{RateLimitPerSecond: &rate})
		for range 60 {
			b.message(t, org, EventOrderPaid)
		}
		start := time.Now()
		b.run(t, b.dispatcherConfig(), nil)
		waitFor(t, 20*time.Second, "all delivered", func() bool {
			var n int64
			require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT count(*) FROM webhook_deliveries WHERE status = 'succeeded'").Scan(&n))
			return n == 60
		})
		elapsed := time.Since(start)
		t.Logf("60 deliveries at 20/s took %v", elapsed)
		require.GreaterOrEqual(t, elapsed, 1800*time.Millisecond, "20 burst, then 20/s: at least 2s for 60")
		var maxAttempts int32
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT max(attempts) FROM webhook_deliveries").Scan(&maxAttempts))
		require.Equal(t, int32(1), maxAttempts, "throttled deliveries used no attempts")
	})

	t.Run("ConsistentFailureDisablesEndpoint", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		rc := newReceiver(t, status(http.StatusInternalServerError))
		e := b.endpoint(t, org, rc.URL, EndpointParams{})
		msg := b.message(t, org, EventOrderPaid)
		cfg := b.dispatcherConfig()
		cfg.DisableAfter = 300 * time.Millisecond
		cfg.RetrySchedule = []time.Duration{0, 200 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond}
		b.run(t, cfg, nil)
		waitFor(t, 10*time.Second, "disabled", func() bool {
			got, err := b.svc.Get(context.Background(), org, e.ID)
			require.NoError(t, err)
			return !got.Enabled
		})
		got, err := b.svc.Get(context.Background(), org, e.ID)
		require.NoError(t, err)
		require.Equal(t, DisabledByFailing, got.DisabledReason)
		require.Equal(t, StatusFailed, b.delivery(t, msg).Status, "kept for recover")

		// Recover needs the endpoint enabled; then it re-sends with a fresh schedule.
		_, err = b.svc.Recover(context.Background(), org, e.ID, RecoverParams{Since: time.Now().Add(-time.Hour)})
		require.ErrorIs(t, err, ErrEndpointDisabled)
	})
}

func splitSigs(h string) []string {
	var out []string
	for _, s := range splitSpace(h) {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

func splitSpace(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ' ' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// canary queues a message for a new organizer's endpoint, first due after
// from now, and returns a wait for its successful delivery. Once it has
// been delivered the dispatcher has claimed, and sent, what was due until
// then: a test waits on it to show that something due earlier was not sent.
func (b *testBundle) canary(t *testing.T, after time.Duration) (wait func()) {
	t.Helper()
	org := uuid.New()
	b.endpoint(t, org, newReceiver(t, status(http.StatusNoContent)).URL, EndpointParams{})
	msg := b.messageDue(t, org, EventOrderPaid, after)
	return func() {
		t.Helper()
		waitFor(t, after+10*time.Second, "the canary's delivery", func() bool { return b.delivery(t, msg).Status == StatusSucceeded })
	}
}
