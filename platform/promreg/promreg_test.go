package promreg_test

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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

// Each helper declares its series as given (name, help, type, labels,
// buckets), and a second declaration of the same series shares the
// first, as Register does.
func TestHelpersDeclareTheSeriesAsGiven(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	promreg.Counter(reg, "boxoffice_test_c_total", "a counter").Add(2)
	promreg.CounterVec(reg, "boxoffice_test_cv_total", "a counter vec", "a", "b").WithLabelValues("x", "y").Inc()
	promreg.Gauge(reg, "boxoffice_test_g", "a gauge").Set(3)
	promreg.GaugeVec(reg, "boxoffice_test_gv", "a gauge vec", "state").WithLabelValues("open").Set(4)
	promreg.Histogram(reg, "boxoffice_test_h_seconds", "a histogram", []float64{1, 2}).Observe(1.5)
	promreg.HistogramVec(reg, "boxoffice_test_hv_seconds", "a histogram vec", []float64{.5}, "kind").WithLabelValues("k").Observe(.1)

	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]*dto.MetricFamily{}
	for _, f := range families {
		got[f.GetName()] = f
	}
	for name, want := range map[string]struct {
		help   string
		typ    dto.MetricType
		labels []string
	}{
		"boxoffice_test_c_total":    {"a counter", dto.MetricType_COUNTER, nil},
		"boxoffice_test_cv_total":   {"a counter vec", dto.MetricType_COUNTER, []string{"a", "b"}},
		"boxoffice_test_g":          {"a gauge", dto.MetricType_GAUGE, nil},
		"boxoffice_test_gv":         {"a gauge vec", dto.MetricType_GAUGE, []string{"state"}},
		"boxoffice_test_h_seconds":  {"a histogram", dto.MetricType_HISTOGRAM, nil},
		"boxoffice_test_hv_seconds": {"a histogram vec", dto.MetricType_HISTOGRAM, []string{"kind"}},
	} {
		f := got[name]
		require.NotNil(t, f, name)
		require.Equal(t, want.help, f.GetHelp(), name)
		require.Equal(t, want.typ, f.GetType(), name)
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		require.Equal(t, want.labels, labels, name)
	}
	var bounds []float64
	for _, b := range got["boxoffice_test_h_seconds"].GetMetric()[0].GetHistogram().GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	require.Equal(t, []float64{1, 2}, bounds)

	require.Same(t, promreg.Gauge(reg, "boxoffice_test_g", "a gauge"), promreg.Gauge(reg, "boxoffice_test_g", "a gauge"))
	require.NotNil(t, promreg.CounterVec(nil, "boxoffice_test_cv_total", "a counter vec", "a", "b"), "a nil registry registers nothing")
}

// Components that start at once (many consumers of one process) declare
// the same series concurrently: every one of them gets the one series.
func TestHelpersRacingShareOneSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	const n = 16
	start := make(chan struct{})
	got := make([]*prometheus.CounterVec, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			got[i] = promreg.CounterVec(reg, "boxoffice_test_race_total", "raced", "consumer")
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		require.Same(t, got[0], got[i], "declaration %d", i)
	}
}
