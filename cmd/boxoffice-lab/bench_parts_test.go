package main

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/waitingroom"
	"boxoffice/platform/promreg"
)

// The bench counts the release controller's cuts of R by reason, from the
// product's own series; its increases (healthy) are not cuts.
func TestRateCutsCountTheControllersDecreasesByReason(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	require.Empty(t, rateCuts(reg), "no series yet: no cuts")
	changes := promreg.CounterVec(reg, "boxoffice_admission_rate_changes_total", "R's changes by reason.", "reason")
	changes.WithLabelValues(waitingroom.ReasonHealthy).Add(5)
	changes.WithLabelValues(waitingroom.ReasonPoolWait).Add(2)
	changes.WithLabelValues(waitingroom.ReasonHoldP99).Inc()
	require.Equal(t, map[string]float64{waitingroom.ReasonPoolWait: 2, waitingroom.ReasonHoldP99: 1}, rateCuts(reg))
}
