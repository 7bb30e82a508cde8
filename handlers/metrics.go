package handlers

import (
	"strconv"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/prometheus/client_golang/prometheus"
)

// httpMetrics records the latency of every operation, the signal behind the
// hold p99 and conflict rate an operator watches (docs/design/signals.md).
type httpMetrics struct {
	duration *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "boxoffice_http_request_duration_seconds",
		Help:    "Latency of API operations by operation id and status code.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"operation", "code"})}
	if reg != nil {
		reg.MustRegister(m.duration)
	}
	return m
}

// middleware observes each operation; the labels are bounded by the number
// of operations and status codes.
func (m *httpMetrics) middleware(ctx huma.Context, next func(huma.Context)) {
	start := time.Now()
	next(ctx)
	m.duration.WithLabelValues(ctx.Operation().OperationID, strconv.Itoa(ctx.Status())).Observe(time.Since(start).Seconds())
}
