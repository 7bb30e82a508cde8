package webhooks

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org := uuid.New()
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
	})
	b.endpoint(t, org, rc.URL, EndpointParams{MaxConcurrency: 1})
	first := b.message(t, org, EventOrderPaid)
	d, _ := b.run(t, b.dispatcherConfig(), nil)
	waitFor(t, 5*time.Second, "needs review", func() bool { return b.delivery(t, first).Status == StatusNeedsReview })
	// The dispatcher counts an attempt once its outcome is committed, a
	// moment after the row says so.
	waitFor(t, 5*time.Second, "the review counted", func() bool {
		return value(t, d.metrics.needsReview.WithLabelValues(ClassHTTP4xx)) == 1
	})

	// Attempts carry their trigger: the first is the original, the
	// second an automatic retry.
	require.Equal(t, 1.0, value(t, d.metrics.attempts.WithLabelValues(ClassHTTP5xx, TriggerOriginal)))
	require.Equal(t, 1.0, value(t, d.metrics.attempts.WithLabelValues(ClassHTTP4xx, TriggerRetry)))
	require.Equal(t, 0.0, value(t, d.metrics.attempts.WithLabelValues(ClassHTTP4xx, TriggerOriginal)))
	require.Equal(t, 0.0, value(t, d.metrics.deadLetters.WithLabelValues("terminal")), "a terminal answer is not a dead letter")
	waitFor(t, 5*time.Second, "the delivery in the review gauge", func() bool {
		d.refreshStats(context.Background())
		return value(t, d.metrics.needingReview) == 1
	})

	// A pending delivery an hour old shows in the backlog gauge; the
	// endpoint gauge counts by circuit state.
	// It is committed due in an hour, so the dispatcher, idle since the
	// review, cannot send it before it is backdated (made due now, it
	// was sometimes sent, refused, and parked in review first).
	pending := b.messageDue(t, org, EventOrderPaid, time.Hour)
	_, err := b.pool.Exec(context.Background(),
		"UPDATE webhook_deliveries SET created_at = now() - interval '1 hour', next_attempt_at = now() + interval '1 hour' WHERE message_id = $1", pending)
	require.NoError(t, err)
	// The dispatcher's own stats loop refreshes the gauges too: one of its
	// readings from before the UPDATE may land after this one, so read
	// until the gauge shows the hour.
	waitFor(t, 5*time.Second, "the hour-old delivery in the backlog gauge", func() bool {
		d.refreshStats(context.Background())
		return math.Abs(value(t, d.metrics.oldestPending)-3600) <= 60
	})
	require.Equal(t, 1.0, value(t, d.metrics.endpointsByState.WithLabelValues("closed")))

	// Every series is registered, with bounded labels only.
	families, err := b.reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				require.Contains(t, []string{"error_class", "reason", "state", "trigger"}, l.GetName(), "no per-endpoint or per-tenant labels")
			}
		}
	}
	for _, n := range []string{
		"boxoffice_webhook_attempts_total", "boxoffice_webhook_attempt_seconds", "boxoffice_webhook_attempts_per_delivery",
		"boxoffice_webhook_dead_letters_total", "boxoffice_webhook_oldest_pending_delivery_age_seconds", "boxoffice_webhook_endpoints",
		"boxoffice_webhook_needs_review_total", "boxoffice_webhook_deliveries_needing_review",
	} {
		require.True(t, names[n], n)
	}
}

// value reads a counter's or gauge's current value.
func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	require.NoError(t, (<-ch).Write(&m))
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}
