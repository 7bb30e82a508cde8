package main

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/cmd/boxoffice/roles"
	"boxoffice/domain/waitingroom"
	"boxoffice/platform/db"
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

// The bench's product opens the pool every deployed role opens: its
// sessions declare the region epoch (so each write statement runs the
// region fence's check, as in production) and carry the statement and lock
// timeouts. Built by hand, the bench's pool once declared no epoch.
func TestBenchProductPoolIsTheRolesPool(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DATABASE_URL":               "postgres://boxoffice@127.0.0.1:5432/boxoffice",
		"DATABASE_MAX_CONNS":         "9",
		"DATABASE_STATEMENT_TIMEOUT": "7s",
		"DATABASE_LOCK_TIMEOUT":      "2s",
		"BOXOFFICE_REGION_EPOCH":     "3",
	}
	cfg, err := roles.LoadConfig(func(k string) string { return env[k] }, "DATABASE_URL")
	require.NoError(t, err)
	tracer := db.NewCostTracer()
	got := productPool(cfg, tracer)
	require.Equal(t, int64(3), got.RegionEpoch, "the bench's sessions are fenced as the roles' are")
	require.Equal(t, int32(9), got.MaxConns)
	require.Equal(t, 7*time.Second, got.StatementTimeout)
	require.Equal(t, 2*time.Second, got.LockTimeout)
	require.Same(t, tracer, got.Tracer, "the bench's own tracer counts the round trips")
	want := cfg.PoolConfig(cfg.DatabaseURL)
	want.Tracer = tracer
	require.Equal(t, want, got)
}
