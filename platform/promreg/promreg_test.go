package promreg_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/promreg"
)

func TestRegister(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "boxoffice_test_total", Help: "test"}
	first := promreg.Register(reg, prometheus.NewCounter(opts))
	second := promreg.Register(reg, prometheus.NewCounter(opts))
	require.Same(t, first, second, "the second registration shares the first collector")

	loose := prometheus.NewCounter(opts)
	require.Same(t, loose, promreg.Register[prometheus.Counter](nil, loose))

	require.Panics(t, func() {
		promreg.Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "boxoffice_test_total", Help: "other"}))
	})
}
