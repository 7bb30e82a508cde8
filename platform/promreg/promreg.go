// Package promreg registers Prometheus collectors so that several
// components of one kind (two relays, many consumers) can share a registry.
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns it, or returns the equal
// collector already registered there, so components registering the same
// metrics share them. A nil reg registers nothing and returns c. Any other
// registration error is a programming error (a clashing metric of the same
// name) and panics.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(fmt.Sprintf("register metrics: %v", err))
}

// Counter, CounterVec, Gauge, GaugeVec, Histogram and HistogramVec make
// one series of name and help (and labels, or buckets) and register it on
// reg with Register: the one way a component declares a metric, one line
// a series. Like Register, a nil reg registers nothing, and an equal
// series already registered on reg is returned instead of the new one.

// Counter registers a counter.
func Counter(reg prometheus.Registerer, name, help string) prometheus.Counter {
	return Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help}))
}

// CounterVec registers a counter with labels.
func CounterVec(reg prometheus.Registerer, name, help string, labels ...string) *prometheus.CounterVec {
	return Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels))
}

// Gauge registers a gauge.
func Gauge(reg prometheus.Registerer, name, help string) prometheus.Gauge {
	return Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help}))
}

// GaugeVec registers a gauge with labels.
func GaugeVec(reg prometheus.Registerer, name, help string, labels ...string) *prometheus.GaugeVec {
	return Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels))
}

// Histogram registers a histogram with buckets.
func Histogram(reg prometheus.Registerer, name, help string, buckets []float64) prometheus.Histogram {
	return Register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}))
}

// HistogramVec registers a histogram with buckets and labels.
func HistogramVec(reg prometheus.Registerer, name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels))
}
