package webhooks

import (
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/platform/promreg"
)

// metrics are the dispatcher's series. Labels come from small fixed sets
// (error classes, reasons, circuit states): no per-endpoint or per-tenant
// label, so cardinality does not grow with customers.
type metrics struct {
	attempts       *prometheus.CounterVec
	attemptSeconds prometheus.Observer
	successLatency prometheus.Observer
	attemptsPerMsg prometheus.Observer
	deadLetters    *prometheus.CounterVec
	// needsReview counts deliveries that entered needs_review, by the
	// error class of their terminal answer; needingReview is how many
	// wait there now.
	needsReview      *prometheus.CounterVec
	needingReview    prometheus.Gauge
	throttled        *prometheus.CounterVec
	oldestPending    prometheus.Gauge
	endpointsByState *prometheus.GaugeVec
	// signatureFailures counts attempts that could not be signed (nothing
	// was sent), by reason: unknown_key, decrypt_failed, malformed; and
	// previous_<reason> for a rotated-out secret left out of a signature.
	signatureFailures *prometheus.CounterVec
	duplicates        prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		attempts: promreg.CounterVec(reg, "boxoffice_webhook_attempts_total",
			"Webhook delivery attempts by error class (none for 2xx) and trigger (original, retry, replay, recover).", "error_class", "trigger"),
		attemptSeconds: promreg.Histogram(reg, "boxoffice_webhook_attempt_seconds",
			"Duration of one webhook attempt, whatever its outcome.", []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}),
		successLatency: promreg.Histogram(reg, "boxoffice_webhook_success_latency_seconds",
			"Time from a message's fact to its successful delivery to one endpoint, retries included.", []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200, 36000, 108000}),
		attemptsPerMsg: promreg.Histogram(reg, "boxoffice_webhook_attempts_per_delivery",
			"Attempts a delivery took to succeed or die.", []float64{1, 2, 3, 4, 5, 6, 7, 8, 10, 15, 20}),
		deadLetters: promreg.CounterVec(reg, "boxoffice_webhook_dead_letters_total",
			"Deliveries that died: retries exhausted, endpoint gone, address refused or payload too large (terminal answers go to needs_review instead).", "reason"),
		needsReview: promreg.CounterVec(reg, "boxoffice_webhook_needs_review_total",
			"Deliveries that got a terminal answer (redirect, 4xx other than 408/410/429, 501, 505) and went to needs_review, by error class.", "error_class"),
		needingReview: promreg.Gauge(reg, "boxoffice_webhook_deliveries_needing_review",
			"Webhook deliveries waiting in needs_review for a recover or replay, refreshed every few seconds."),
		throttled: promreg.CounterVec(reg, "boxoffice_webhook_throttled_total",
			"Deliveries put back without an attempt, by reason.", "reason"),
		oldestPending: promreg.Gauge(reg, "boxoffice_webhook_oldest_pending_delivery_age_seconds",
			"Age of the oldest pending webhook delivery, refreshed every few seconds."),
		endpointsByState: promreg.GaugeVec(reg, "boxoffice_webhook_endpoints",
			"Webhook endpoints by circuit state (closed, open, half_open) or disabled, refreshed every few seconds.", "state"),
		signatureFailures: promreg.CounterVec(reg, "boxoffice_webhook_signature_failures_total",
			"Webhook attempts not sent because the endpoint's secret could not sign (reason unknown_key, decrypt_failed, malformed), and rotated-out secrets left out of a signature (previous_<reason>).", "reason"),
		duplicates: promreg.Counter(reg, "boxoffice_webhook_duplicate_deliveries_total",
			"Webhook requests sent with a webhook-id the endpoint had already acknowledged with a recorded 2xx (replays and recovers of succeeded deliveries). A send again after a 2xx whose recording was lost cannot be told apart and is not counted."),
	}
}
