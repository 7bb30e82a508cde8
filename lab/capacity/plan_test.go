package capacity

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testCosts and testOnsale are round figures whose plan is easy to work
// out by hand: PostgreSQL 0.5 × 10 + 0.5 × 2 = 6 ms per admitted buyer,
// so a 6-core writer with half kept free sustains R = 3000 ÷ 6 = 500.
func testCosts() Costs {
	return Costs{
		PostgresMsPerOrder: 10, AbandonedHoldPostgresMs: 2, ProductMsPerOrder: 8, APIMsPerOrder: 3, WorkerMsPerOrder: 5,
		RoundTripsPerOrder: 50, EventsPerOrder: 10, EventBytesAvg: 1000,
	}
}

func testOnsale() Onsale {
	return Onsale{
		AttemptsPerSec: 5000, AdmittedPerSec: 400, SeatsPerOrder: 2, PayRatio: 0.5, HoldLifetime: time.Minute,
		SafetyMargin: 0.5, WriterCores: 6, APITaskCores: 1, WorkerTaskCores: 2, PoolSize: 10, MaxConnections: 40,
		OpsConnections: 5, Retention: time.Hour, StreamReplicas: 3,
	}
}

func TestPlan(t *testing.T) {
	t.Parallel()
	type want struct {
		target, perCell    Rates
		cells              int
		writerCoresOneCell float64
		api, worker        Tasks
		conns              Connections
	}
	// One cell of testOnsale's: R 500; at 400 admitted/s, 200 orders/s:
	// API 3 × 200 ÷ (1 × 1000 × 0.5) = 1.2 tasks, workers 5 × 200 ÷
	// (2 × 1000 × 0.5) = 1; (2 + 1) × 10 + 5 = 35 connections of 40, and
	// (40 − 5) ÷ 3 = 11 the largest pool.
	at400 := Rates{Admitted: 400, Orders: 200, SeatLocks: 800, AbandonedHolds: 200}
	cases := []struct {
		name   string
		change func(*Onsale)
		want   want
	}{
		{"OneCellCarriesATargetBelowItsR", func(*Onsale) {}, want{
			target: at400, perCell: at400, cells: 1, writerCoresOneCell: 4.8, // 400 × 6 ÷ (1000 × 0.5)
			api: Tasks{1.2, 2}, worker: Tasks{1, 1}, conns: Connections{Open: 35, Max: 40, Fits: true, MaxPoolSize: 11},
		}},
		{"SpreadsATargetAboveRoverCells", func(o *Onsale) { o.AdmittedPerSec = 1200 }, want{
			target: Rates{1200, 600, 2400, 600}, perCell: at400, cells: 3, writerCoresOneCell: 14.4, // 1200 × 6 ÷ 500
			api: Tasks{1.2, 2}, worker: Tasks{1, 1}, conns: Connections{Open: 35, Max: 40, Fits: true, MaxPoolSize: 11},
		}},
		{"TakesTheTargetAsOrders", func(o *Onsale) { o.AdmittedPerSec, o.OrdersPerSec = 0, 250 }, want{
			// 250 ÷ 0.5 = 500 admitted: exactly one cell's R.
			target: Rates{500, 250, 1000, 250}, perCell: Rates{500, 250, 1000, 250}, cells: 1, writerCoresOneCell: 6,
			api: Tasks{1.5, 2}, worker: Tasks{1.25, 2}, conns: Connections{Open: 45, Max: 40, Fits: false, MaxPoolSize: 8},
		}},
		{"PlansOneFullCellWithoutATarget", func(o *Onsale) { o.AdmittedPerSec = 0 }, want{
			target: Rates{500, 250, 1000, 250}, perCell: Rates{500, 250, 1000, 250}, cells: 1, writerCoresOneCell: 6,
			api: Tasks{1.5, 2}, worker: Tasks{1.25, 2}, conns: Connections{Open: 45, Max: 40, Fits: false, MaxPoolSize: 8},
		}},
		{"RunsAtLeastMinTasks", func(o *Onsale) { o.MinTasks = 3 }, want{
			target: at400, perCell: at400, cells: 1, writerCoresOneCell: 4.8,
			// (3 + 3) × 10 + 5 = 65 > 40; (40 − 5) ÷ 6 = 5.
			api: Tasks{1.2, 3}, worker: Tasks{1, 3}, conns: Connections{Open: 65, Max: 40, Fits: false, MaxPoolSize: 5},
		}},
		{"FindsNoPoolWhenOperationsTakeEverything", func(o *Onsale) { o.OpsConnections = 40 }, want{
			target: at400, perCell: at400, cells: 1, writerCoresOneCell: 4.8,
			api: Tasks{1.2, 2}, worker: Tasks{1, 1}, conns: Connections{Open: 70, Max: 40, Fits: false, MaxPoolSize: 0},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := testOnsale()
			tc.change(&o)
			require.NoError(t, o.Validate())
			r := Plan(testCosts(), o)
			require.InDelta(t, 6, r.PostgresMsPerAdmitted, 1e-9)
			requireRates(t, Rates{500, 250, 1000, 250}, r.CellMax)
			requireRates(t, tc.want.target, r.Target)
			requireRates(t, tc.want.perCell, r.PerCell)
			require.Equal(t, tc.want.cells, r.Cells)
			require.InDelta(t, tc.want.writerCoresOneCell, r.WriterCoresOneCell, 1e-9)
			require.InDelta(t, tc.want.api.Needed, r.API.Needed, 1e-9)
			require.Equal(t, tc.want.api.Run, r.API.Run)
			require.InDelta(t, tc.want.worker.Needed, r.Worker.Needed, 1e-9)
			require.Equal(t, tc.want.worker.Run, r.Worker.Run)
			require.Equal(t, tc.want.conns, r.Connections)
			require.InDelta(t, 5000-tc.want.target.Admitted, r.QueuedPerSec, 1e-9)
			// Per cell: orders × 50 round trips, abandoned holds × 2 seats
			// × 60 s, orders × 10 events of 1,000 bytes, × 3600 s × 3.
			require.InDelta(t, tc.want.perCell.Orders*50, r.RoundTripsPerSec, 1e-6)
			require.InDelta(t, tc.want.perCell.AbandonedHolds*120, r.SeatsHeldByAbandoned, 1e-6)
			require.InDelta(t, tc.want.perCell.Orders*10, r.Stream.EventsPerSec, 1e-6)
			require.InDelta(t, tc.want.perCell.Orders*10_000, r.Stream.BytesPerSec, 1e-3)
			require.InDelta(t, tc.want.perCell.Orders*10_000*3600*3, r.Stream.StoredBytes, 1)
		})
	}
}

func requireRates(t *testing.T, want, got Rates) {
	t.Helper()
	require.InDelta(t, want.Admitted, got.Admitted, 1e-6, "admitted")
	require.InDelta(t, want.Orders, got.Orders, 1e-6, "orders")
	require.InDelta(t, want.SeatLocks, got.SeatLocks, 1e-6, "seat locks")
	require.InDelta(t, want.AbandonedHolds, got.AbandonedHolds, 1e-6, "abandoned holds")
}

// The reference onsale of docs/capacity.md: 10,000 attempts a second shaped into R = 800
// admitted buyers, 2.4 seats and 8 events per successful order, 500
// successful orders: 1,920 seat lock attempts and 4,000 events a second.
func TestPlanTheSeedsExample(t *testing.T) {
	t.Parallel()
	c := Costs{PostgresMsPerOrder: 11.3, ProductMsPerOrder: 8.7, EventsPerOrder: 8, EventBytesAvg: 900}
	o := Onsale{
		AttemptsPerSec: 10_000, AdmittedPerSec: 800, SeatsPerOrder: 2.4, PayRatio: 500.0 / 800, HoldLifetime: 5 * time.Minute,
		SafetyMargin: 0.3, WriterCores: 16, APITaskCores: 2, WorkerTaskCores: 2, PoolSize: 16, MaxConnections: 100,
		Retention: 168 * time.Hour, StreamReplicas: 3,
	}
	require.NoError(t, o.Validate())
	r := Plan(c, o)
	requireRates(t, Rates{Admitted: 800, Orders: 500, SeatLocks: 1920, AbandonedHolds: 300}, r.Target)
	require.InDelta(t, 9200, r.QueuedPerSec, 1e-9)
	require.Equal(t, 1, r.Cells)
	require.InDelta(t, 4000, r.Stream.EventsPerSec, 1e-9)
	// 4,000 × 900 B × 604,800 s × 3.
	require.InDelta(t, 6.531840e12, r.Stream.StoredBytes, 1)
}

// docs/capacity.md's worked example: the reference onsale with the costs
// measured on this repository's machine on 2026-12-02.
func TestPlanTheWorkedExampleOfTheDocs(t *testing.T) {
	t.Parallel()
	c := Costs{
		MachineCores: 2, TicketedPerSec: 93, PostgresMsPerOrder: 11.3, ProductMsPerOrder: 8.7, APIMsPerOrder: 2.6,
		WorkerMsPerOrder: 6.1, BuyersMsPerOrder: 0.7, StripeMsPerOrder: 3.0, RoundTripsPerOrder: 94, EventsPerOrder: 9,
		EventBytesAvg: 900,
	}
	o := Onsale{
		AttemptsPerSec: 10_000, AdmittedPerSec: 800, SeatsPerOrder: 2.4, PayRatio: 0.625, HoldLifetime: 5 * time.Minute,
		SafetyMargin: 0.3, WriterCores: 16, APITaskCores: 2, WorkerTaskCores: 2, MinTasks: 2, PoolSize: 16,
		MaxConnections: 100, OpsConnections: 10, Retention: 168 * time.Hour, StreamReplicas: 3,
	}
	r := Plan(c, o)
	// Abandoned hold 0.25 × 11.3 = 2.825 ms; 0.625 × 11.3 + 0.375 × 2.825.
	require.InDelta(t, 2.825, r.Costs.AbandonedHoldPostgresMs, 1e-9)
	require.InDelta(t, 8.121875, r.PostgresMsPerAdmitted, 1e-9)
	// 16 × 1000 × 0.7 ÷ 8.121875.
	requireRates(t, Rates{Admitted: 11200 / 8.121875, Orders: 0.625 * 11200 / 8.121875, SeatLocks: 2.4 * 11200 / 8.121875,
		AbandonedHolds: 0.375 * 11200 / 8.121875}, r.CellMax)
	require.InDelta(t, 1379.0, r.CellMax.Admitted, 0.5)
	require.Equal(t, 1, r.Cells)
	require.InDelta(t, 9.282, r.WriterCoresOneCell, 0.001) // 800 × 8.121875 ÷ 700
	// API 2.6 × 500 ÷ 1400 = 0.93, workers 6.1 × 500 ÷ 1400 = 2.18.
	require.Equal(t, Tasks{Needed: 1300.0 / 1400, Run: 2}, r.API)
	require.InDelta(t, 3050.0/1400, r.Worker.Needed, 1e-9)
	require.Equal(t, 3, r.Worker.Run)
	require.Equal(t, Connections{Open: 90, Max: 100, Fits: true, MaxPoolSize: 18}, r.Connections)
	require.InDelta(t, 47_000, r.RoundTripsPerSec, 1e-6)
	require.InDelta(t, 216_000, r.SeatsHeldByAbandoned, 1e-6) // 300 holds/s × 2.4 × 300 s
	require.InDelta(t, 4500, r.Stream.EventsPerSec, 1e-9)
	require.InDelta(t, 7.348320e12, r.Stream.StoredBytes, 1) // 4,500 × 900 × 604,800 × 3
	// 2000 ÷ (11.3 + 8.7 + 0.7 + 3.0) = 84.4 against 93 measured.
	require.InDelta(t, 2000/23.7, r.Shared.Predicted, 1e-9)
	require.InDelta(t, 2000/23.7/93, r.Shared.Ratio, 1e-9)
	require.True(t, r.Shared.Within)
}

func TestPredictShared(t *testing.T) {
	t.Parallel()
	// 10 + 8 + 1 + 1 = 20 ms of the machine per order: 2 cores make 100/s.
	c := Costs{PostgresMsPerOrder: 10, ProductMsPerOrder: 8, BuyersMsPerOrder: 1, StripeMsPerOrder: 1, MachineCores: 2}
	cases := []struct {
		name     string
		measured float64
		ratio    float64
		within   bool
	}{
		{"WithinWhenTheMeasurementIsClose", 90, 100.0 / 90, true},
		{"WithinAtTheEdge", 80, 1.25, true},
		{"NotWithinWhenTheCostsMissWork", 70, 100.0 / 70, false},
		{"NotWithinWhenTheCostsCountTooMuch", 150, 100.0 / 150, false},
		{"NotMadeWithoutAMeasurement", 0, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := c
			c.TicketedPerSec = tc.measured
			require.InDelta(t, 100, PredictShared(c, 2), 1e-9)
			require.InDelta(t, 200, PredictShared(c, 4), 1e-9)
			s := Plan(c, testOnsale()).Shared
			require.InDelta(t, 100, s.Predicted, 1e-9)
			require.InDelta(t, tc.ratio, s.Ratio, 1e-9)
			require.Equal(t, tc.within, s.Within)
		})
	}

	// A window that kept 79 % of the machine busy is checked at the
	// cores it used: the costs add up when they account for that CPU,
	// whatever the machine would do saturated.
	t.Run("AtTheMeasuredBusyShare", func(t *testing.T) {
		t.Parallel()
		c := c
		c.TicketedPerSec, c.MachineBusyShare = 79, 0.79
		s := Plan(c, testOnsale()).Shared
		require.InDelta(t, 1.58, s.Busy, 1e-9)
		require.InDelta(t, 79, s.Predicted, 1e-9)
		require.InDelta(t, 1, s.Ratio, 1e-9)
		require.True(t, s.Within)
		c.MachineBusyShare = 0 // not measured: every core
		s = Plan(c, testOnsale()).Shared
		require.InDelta(t, 2, s.Busy, 1e-9)
		require.False(t, s.Within, "100 predicted for all cores against 79")
	})
	require.Zero(t, Plan(testCosts(), testOnsale()).Shared.Cores, "no machine, no check")
}

func TestOnsaleValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(*Onsale)
		err    string
	}{
		{"AcceptsTheTestOnsale", func(*Onsale) {}, ""},
		{"AcceptsNoTarget", func(o *Onsale) { o.AdmittedPerSec = 0 }, ""},
		{"RefusesTwoTargets", func(o *Onsale) { o.OrdersPerSec = 100 }, "not both"},
		{"RefusesNoPayingBuyers", func(o *Onsale) { o.PayRatio = 0 }, "pay ratio"},
		{"RefusesMoreThanAllPaying", func(o *Onsale) { o.PayRatio = 1.1 }, "pay ratio"},
		{"RefusesNoSeats", func(o *Onsale) { o.SeatsPerOrder = 0 }, "seats per order"},
		{"RefusesKeepingEveryCoreFree", func(o *Onsale) { o.SafetyMargin = 1 }, "safety margin"},
		{"RefusesAWriterWithoutCores", func(o *Onsale) { o.WriterCores = 0 }, "cores"},
		{"RefusesAnEmptyPool", func(o *Onsale) { o.PoolSize = 0 }, "pool size"},
		{"RefusesSixReplicas", func(o *Onsale) { o.StreamReplicas = 6 }, "replicas"},
		{"RefusesANegativeRetention", func(o *Onsale) { o.Retention = -time.Hour }, "retention"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := testOnsale()
			tc.change(&o)
			if tc.err == "" {
				require.NoError(t, o.Validate())
				return
			}
			require.ErrorContains(t, o.Validate(), tc.err)
		})
	}
}
