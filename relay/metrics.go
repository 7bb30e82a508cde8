package relay

import (
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/platform/promreg"
)

// metrics are the relay's collectors. Labels are fixed sets, never ids.
type metrics struct {
	// enabled is false when there is no registerer: the collectors still
	// count, but nobody reads them and the stats query does not run.
	enabled       bool
	published     prometheus.Counter
	duplicates    prometheus.Counter
	publishErrors *prometheus.CounterVec
	batchSeconds  prometheus.Histogram
	backlog       prometheus.Gauge
	oldestAge     prometheus.Gauge
	latency       prometheus.Histogram
}

// newMetrics registers the relay's collectors on reg (shared with any
// other relay registered there); with a nil reg they only count.
func newMetrics(reg prometheus.Registerer) *metrics {
	return &metrics{
		enabled: reg != nil,
		published: promreg.Counter(reg, "boxoffice_relay_published_total",
			"Outbox rows JetStream stored on their first acknowledged publish."),
		duplicates: promreg.Counter(reg, "boxoffice_relay_duplicates_total",
			"Outbox rows republished after a lost mark, which JetStream acknowledged as duplicates and did not store again."),
		publishErrors: promreg.CounterVec(reg, "boxoffice_relay_publish_errors_total",
			"Outbox rows not acknowledged by JetStream and released for a retry, by reason: send, timeout, disconnected, no_responders, unavailable (JetStream 5xx), rejected (JetStream 4xx, retried only every 10s), other.", "reason"),
		batchSeconds: promreg.Histogram(reg, "boxoffice_relay_batch_seconds",
			"Time from claiming a batch to deleting its acknowledged rows.", prometheus.ExponentialBuckets(0.001, 2, 15)),
		backlog: promreg.Gauge(reg, "boxoffice_outbox_backlog",
			"Unpublished outbox rows, counted up to 100,000."),
		latency: promreg.Histogram(reg, "boxoffice_outbox_publish_latency_seconds",
			"Time from an event's commit to JetStream's acknowledgement of it, by the database clock.", []float64{.001, .002, .005, .01, .015, .02, .025, .03, .04, .05, .075, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}),
		oldestAge: promreg.Gauge(reg, "boxoffice_outbox_oldest_unpublished_age_seconds",
			"Age of the oldest unpublished outbox row: the event-delivery latency the business sees. 0 when none."),
	}
}
