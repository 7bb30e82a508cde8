package consumers

import (
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/platform/promreg"
)

// metrics are one consumer's series. The vectors behind them carry one
// label, consumer, so their cardinality is the number of consumers.
type metrics struct {
	delivered    prometheus.Counter
	acked        prometheus.Counter
	redelivered  prometheus.Counter
	deadLettered prometheus.Counter
	duplicates   prometheus.Counter
	batch        prometheus.Observer
	pending      prometheus.Gauge
	handler      prometheus.Observer
}

// newMetrics registers the vectors on reg, or reuses the ones another
// consumer registered there, and returns the series of consumer name. A
// nil reg keeps them unregistered.
func newMetrics(reg prometheus.Registerer, name string) *metrics {
	label := []string{"consumer"}
	counter := func(metric, help string) prometheus.Counter {
		return promreg.CounterVec(reg, metric, help, label...).WithLabelValues(name)
	}
	return &metrics{
		delivered:    counter("boxoffice_consumer_delivered_total", "Messages delivered to the consumer, redeliveries included."),
		acked:        counter("boxoffice_consumer_acked_total", "Messages acked after their effect committed, or was found committed."),
		redelivered:  counter("boxoffice_consumer_redelivered_total", "Deliveries of a message that had been delivered before."),
		deadLettered: counter("boxoffice_consumer_dead_lettered_total", "Messages stored on the dead-letter stream and terminated."),
		duplicates:   counter("boxoffice_consumer_duplicates_total", "Deliveries of an event the inbox showed applied already: acked without running the handler."),
		batch: promreg.HistogramVec(reg, "boxoffice_consumer_batch_size",
			"Valid deliveries handled together in one batch (one transaction).", []float64{1, 2, 4, 8, 16, 32, 64}, label...).WithLabelValues(name),
		pending: promreg.GaugeVec(reg, "boxoffice_consumer_pending",
			"Messages not yet delivered plus delivered and not yet acked, refreshed every few seconds.", label...).WithLabelValues(name),
		handler: promreg.HistogramVec(reg, "boxoffice_consumer_handler_seconds",
			"Time to handle the batch of a delivery: external calls, inbox insert, handlers and commit; observed once per delivery.", []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}, label...).WithLabelValues(name),
	}
}
