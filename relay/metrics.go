package relay

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
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

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		enabled: reg != nil,
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "boxoffice_relay_published_total",
			Help: "Outbox rows JetStream stored on their first acknowledged publish.",
		}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "boxoffice_relay_duplicates_total",
			Help: "Outbox rows republished after a lost mark, which JetStream acknowledged as duplicates and did not store again.",
		}),
		publishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "boxoffice_relay_publish_errors_total",
			Help: "Outbox rows not acknowledged by JetStream and released for a retry, by reason: send, timeout, disconnected, no_responders, unavailable (JetStream 5xx), rejected (JetStream 4xx, retried only every 10s), other.",
		}, []string{"reason"}),
		batchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "boxoffice_relay_batch_seconds",
			Help:    "Time from claiming a batch to deleting its acknowledged rows.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}),
		backlog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "boxoffice_outbox_backlog",
			Help: "Unpublished outbox rows, counted up to 100,000.",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "boxoffice_outbox_publish_latency_seconds",
			Help:    "Time from an event's commit to JetStream's acknowledgement of it, by the database clock.",
			Buckets: []float64{.001, .002, .005, .01, .015, .02, .025, .03, .04, .05, .075, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		oldestAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "boxoffice_outbox_oldest_unpublished_age_seconds",
			Help: "Age of the oldest unpublished outbox row: the event-delivery latency the business sees. 0 when none.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.published, err = register(reg, m.published)
	if err != nil {
		return nil, err
	}
	m.latency, err = register(reg, m.latency)
	if err != nil {
		return nil, err
	}
	m.duplicates, err = register(reg, m.duplicates)
	if err != nil {
		return nil, err
	}
	m.publishErrors, err = register(reg, m.publishErrors)
	if err != nil {
		return nil, err
	}
	m.batchSeconds, err = register(reg, m.batchSeconds)
	if err != nil {
		return nil, err
	}
	m.backlog, err = register(reg, m.backlog)
	if err != nil {
		return nil, err
	}
	m.oldestAge, err = register(reg, m.oldestAge)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// the same description, so several relays in one process share theirs.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("register metrics: %w", err)
}
