package reconcile_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/payments"
	"boxoffice/domain/payments/sandbox"
	"boxoffice/domain/purchase"
	"boxoffice/ops/reconcile"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

// A scheduled run repairs what it finds and counts it; while another
// process holds the reconcile lock a run is skipped, not run twice at
// once; the next run finds the repaired order again (the saga has not
// acted in this test) but repairs nothing twice.
func TestScheduleRunsUnderALockAndCounts(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ev := fixture.NewEvent(t, pool, fixture.EventSpec{Name: "scheduled", StartsAt: time.Now()})
	sb, err := sandbox.New(pool, sandbox.Config{Logger: logger})
	require.NoError(t, err)
	h, err := purchase.NewService(pool, logger, purchase.Config{}).Hold(ctx, purchase.HoldParams{
		UserID: uuid.New(), EventID: ev.ID, SeatIDs: ev.Seats[:1], IdempotencyKey: "k", CorrelationID: "journey",
	})
	require.NoError(t, err)
	in, err := sb.CreateIntent(ctx, payments.CreateIntentParams{OrderID: h.OrderID, AmountMinor: 1000, Currency: "eur", IdempotencyKey: "authorize:" + h.OrderID.String()})
	require.NoError(t, err)
	_, err = sb.Authorize(ctx, in.ID)
	require.NoError(t, err)
	dbtest.Exec(t, pool, `INSERT INTO payments (order_id, provider, payment_intent_id, status, amount_minor, currency)
		VALUES ($1, 'sandbox', $2, 'requires_capture', 1000, 'eur')`, h.OrderID, in.ID)
	// Confirmed an hour ago; the capture never went out.
	dbtest.Exec(t, pool, "UPDATE orders SET status = 'capture_pending', updated_at = now() - interval '1 hour' WHERE id = $1", h.OrderID)

	reg := prometheus.NewRegistry()
	s := reconcile.NewSchedule(reconcile.ScheduleConfig{Pool: pool, Provider: sb, Logger: logger, Registerer: reg})
	other := reconcile.NewSchedule(reconcile.ScheduleConfig{Pool: pool, Provider: sb, Logger: logger})

	// Another process's run holds the lock: this one skips.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(0x7265636f6e63696c))
	require.NoError(t, err)
	_, ran, err := s.RunOnce(ctx)
	require.NoError(t, err)
	require.False(t, ran, "the lock is held elsewhere")
	_, err = conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", int64(0x7265636f6e63696c))
	require.NoError(t, err)
	conn.Release()

	r, ran, err := s.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, ran)
	require.Len(t, r.Findings, 1)
	require.Equal(t, reconcile.RepairCaptureSent, r.Findings[0].Repair)
	require.True(t, r.Findings[0].Applied)
	_, ran, err = other.RunOnce(ctx)
	require.NoError(t, err)
	require.True(t, ran, "the lock was released")
	r, _, err = s.RunOnce(ctx)
	require.NoError(t, err)
	require.False(t, r.Findings[0].Applied, "repaired once")
	require.EqualValues(t, 1, dbtest.Count(t, pool, "SELECT count(*) FROM outbox WHERE aggregate_id = $1 AND event_type = 'CaptureRequested'", h.OrderID))

	require.Equal(t, 1.0, counter(t, reg, "boxoffice_reconcile_repairs_total", reconcile.RepairCaptureSent))
	require.Equal(t, 2.0, counter(t, reg, "boxoffice_reconcile_findings_total", reconcile.RepairCaptureSent))
	require.Equal(t, 1.0, counter(t, reg, "boxoffice_reconcile_runs_total", "skipped"))
	require.Equal(t, 2.0, counter(t, reg, "boxoffice_reconcile_runs_total", "ok"))
}

// counter is the value of the counter name with its one label set to
// value, as reg gathers it.
func counter(t *testing.T, reg *prometheus.Registry, name, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == value {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s}", name, value)
	return 0
}
