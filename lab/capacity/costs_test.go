package capacity

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCostsSaveThenLoadKeepsEveryField(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "costs.json")
	want := Costs{
		MachineCores: 2, TicketedPerSec: 93, PostgresMsPerOrder: 11.3, ProductMsPerOrder: 8.7,
		APIMsPerOrder: 2.6, WorkerMsPerOrder: 6.1, BuyersMsPerOrder: 0.7, StripeMsPerOrder: 3,
		AbandonedHoldPostgresMs: 1.5, RoundTripsPerOrder: 94, EventsPerOrder: 9, EventBytesAvg: 900,
		MeasuredAt: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), Source: "boxoffice-lab bench purchases -costs-out costs.json",
	}
	require.NoError(t, want.Save(path))
	got, err := Load(path)
	require.NoError(t, err)
	require.Equal(t, want, got)

	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, name := range []string{"machineCores", "ticketedPerSec", "postgresMsPerOrder", "productMsPerOrder", "apiMsPerOrder",
		"workerMsPerOrder", "buyersMsPerOrder", "stripeMsPerOrder", "abandonedHoldPostgresMs", "roundTripsPerOrder",
		"eventsPerOrder", "eventBytesAvg", "measuredAt", "source"} {
		require.Contains(t, string(raw), `"`+name+`"`)
	}
}

func TestCostsLoadRefusesWhatItCannotRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := Load(filepath.Join(dir, "missing.json"))
	require.ErrorIs(t, err, os.ErrNotExist)

	path := filepath.Join(dir, "typo.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"postgresMsPerOrdr": 11.3}`), 0o644))
	_, err = Load(path)
	require.ErrorContains(t, err, "postgresMsPerOrdr")
}

func TestCostsValidate(t *testing.T) {
	t.Parallel()
	ok := Costs{PostgresMsPerOrder: 10, ProductMsPerOrder: 8}
	cases := []struct {
		name   string
		change func(*Costs)
		err    string
	}{
		{"AcceptsTheTwoRequiredFigures", func(*Costs) {}, ""},
		{"AcceptsTheSplitForTheProduct", func(c *Costs) { c.ProductMsPerOrder, c.APIMsPerOrder, c.WorkerMsPerOrder = 0, 3, 5 }, ""},
		{"RefusesNoPostgres", func(c *Costs) { c.PostgresMsPerOrder = 0 }, "postgresMsPerOrder"},
		{"RefusesNoProduct", func(c *Costs) { c.ProductMsPerOrder = 0 }, "productMsPerOrder"},
		{"RefusesANegativeFigure", func(c *Costs) { c.EventBytesAvg = -1 }, "eventBytesAvg"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := ok
			tc.change(&c)
			if tc.err == "" {
				require.NoError(t, c.Validate())
				return
			}
			require.ErrorContains(t, c.Validate(), tc.err)
		})
	}
}

// Optional figures left at 0 are filled in, and Plan says which and how.
func TestCostsDefaults(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name                      string
		in                        Costs
		api, worker, product, abd float64
		defaulted                 []string
	}{
		{"SplitsAnUnknownSplitEvenly", Costs{PostgresMsPerOrder: 10, ProductMsPerOrder: 8}, 4, 4, 8, 2.5,
			[]string{"apiMsPerOrder", "workerMsPerOrder", "abandonedHoldPostgresMs"}},
		{"GivesTheAPIWhatTheWorkersLeave", Costs{PostgresMsPerOrder: 10, ProductMsPerOrder: 8, WorkerMsPerOrder: 6, AbandonedHoldPostgresMs: 3}, 2, 6, 8, 3,
			[]string{"apiMsPerOrder"}},
		{"GivesTheWorkersWhatTheAPILeaves", Costs{PostgresMsPerOrder: 10, ProductMsPerOrder: 8, APIMsPerOrder: 3, AbandonedHoldPostgresMs: 3}, 3, 5, 8, 3,
			[]string{"workerMsPerOrder"}},
		{"AddsTheSplitIntoTheProduct", Costs{PostgresMsPerOrder: 10, APIMsPerOrder: 3, WorkerMsPerOrder: 5, AbandonedHoldPostgresMs: 3}, 3, 5, 8, 3,
			[]string{"productMsPerOrder"}},
		{"KeepsWhatWasMeasured", Costs{PostgresMsPerOrder: 10, ProductMsPerOrder: 8, APIMsPerOrder: 3, WorkerMsPerOrder: 6, AbandonedHoldPostgresMs: 3}, 3, 6, 8, 3,
			nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := Plan(tc.in, testOnsale())
			require.InDelta(t, tc.api, r.Costs.APIMsPerOrder, 1e-9)
			require.InDelta(t, tc.worker, r.Costs.WorkerMsPerOrder, 1e-9)
			require.InDelta(t, tc.product, r.Costs.ProductMsPerOrder, 1e-9)
			require.InDelta(t, tc.abd, r.Costs.AbandonedHoldPostgresMs, 1e-9)
			var names []string
			for name := range r.Defaulted {
				names = append(names, name)
			}
			require.ElementsMatch(t, tc.defaulted, names)
		})
	}
}
