package simulator

import (
	"bytes"
	"encoding/json"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/boxoffice/boxoffice/client"
	"github.com/stretchr/testify/require"

	"boxoffice/testkit"
)

func TestArrivals(t *testing.T) {
	t.Parallel()
	// Share of buyers arriving in the first fifth of the window.
	tests := []struct {
		pattern  string
		minEarly float64
		maxEarly float64
	}{
		{ArrivalSpike, 0.55, 0.72},
		{ArrivalRamp, 0.0, 0.08},
		{ArrivalSteady, 0.15, 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			t.Parallel()
			const n, d = 20000, 10 * time.Second
			got := arrivals(tt.pattern, n, d, rand.New(rand.NewPCG(1, 2)))
			require.Len(t, got, n)
			require.True(t, slices.IsSorted(got))
			require.GreaterOrEqual(t, got[0], time.Duration(0))
			require.Less(t, got[n-1], d)
			early := 0
			for _, off := range got {
				if off < d/5 {
					early++
				}
			}
			share := float64(early) / n
			require.GreaterOrEqual(t, share, tt.minEarly)
			require.LessOrEqual(t, share, tt.maxEarly)
		})
	}
}

func TestPercentiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   []float64
		want Percentiles
	}{
		{"Empty", nil, Percentiles{}},
		{"One", []float64{7}, Percentiles{N: 1, P50: 7, P95: 7, P99: 7, Max: 7}},
		{"Hundred", func() []float64 {
			var xs []float64
			for i := 100; i >= 1; i-- {
				xs = append(xs, float64(i))
			}
			return xs
		}(), Percentiles{N: 100, P50: 50, P95: 95, P99: 99, Max: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, percentilesOf(tt.in))
		})
	}
}

func TestChooseFavoursTheFront(t *testing.T) {
	t.Parallel()
	seats := make([]seat, 100)
	for i := range seats {
		seats[i] = seat{ID: string(rune('A'+i/10)) + string(rune('0'+i%10)), Status: client.SeatBodyStatusAvailable}
	}
	seats[0].Status = client.SeatBodyStatusSold
	b := &buyer{rng: rand.New(rand.NewPCG(3, 4))}
	front := 0
	for range 5000 {
		pick := b.choose(seats, map[string]bool{seats[1].ID: true}, 1)
		require.Len(t, pick, 1)
		require.NotEqual(t, seats[0].ID, pick[0], "a sold seat")
		require.NotEqual(t, seats[1].ID, pick[0], "a seat known to be taken")
		if idx := slices.IndexFunc(seats, func(s seat) bool { return s.ID == pick[0] }); idx < 12 {
			front++
		}
	}
	require.Greater(t, front, 5000*35/100, "the front rows are the most wanted")

	t.Run("AdjacentPairs", func(t *testing.T) {
		t.Parallel()
		b := &buyer{rng: rand.New(rand.NewPCG(5, 6))}
		pick := b.choose(seats[:3], nil, 2)
		require.NotEmpty(t, pick)
		require.LessOrEqual(t, len(pick), 2)
		require.Nil(t, b.choose([]seat{{ID: "x", Status: client.SeatBodyStatusHeld}}, nil, 1), "nothing available")
	})
}

// The buyers' seat is two fields of the generated client.SeatBody, under
// the same JSON names: what the server sends decodes into both alike.
func TestSeatIsPartOfSeatBody(t *testing.T) {
	t.Parallel()
	want := client.SeatBody{ID: "5d1c0b7e-2d8a-4c55-9d0e-1a2b3c4d5e6f", Label: "A-1", Section: "Stalls", PriceMinor: 8500,
		Status: client.SeatBodyStatusHeld}
	raw, err := json.Marshal(want)
	require.NoError(t, err)
	var got seat
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, seat{ID: want.ID, Status: want.Status}, got)
}

// syntheticResult is a run's result without a run.
func syntheticResult() *Result {
	r := &Result{EventID: "01a2", Buyers: 500, Seats: 50, Arrival: ArrivalSpike, Window: 10 * time.Second, PayRatio: 0.9,
		Started: time.Now(), BuyersDone: 20 * time.Second, Elapsed: 25 * time.Second}
	for i := range 25 {
		x := float64(i)
		r.Series = append(r.Series, Point{T: x + 1, Queued: int64(400 - 16*i), AdmittedRate: 40 - x, HoldRate: 10 + x/5,
			PaidRate: 8, TicketedRate: x / 3, HoldP50: 40 + x, HoldP95: 90 + x, HoldP99: 150 + 2*x, R: 50, ControllerRate: 60,
			OutboxAge: float64(i % 3), ServerHoldP99: 140, ServerQueued: int64(390 - 15*i), ActiveHolds: 30,
			SeatsAvailable: max(0, 50-2*i), SeatsHeld: 5, SeatsSold: min(50, 2*i)})
	}
	r.Chaos = []ChaosEvent{{T: 5, Process: "relay-1", Action: "killed"}, {T: 8, Process: "relay-1", Action: "restarted"}}
	r.Summary = Summary{Sold: 50, Ticketed: 45, PeakTicketed: 8}
	ok := true
	r.AuditOK, r.Audit = &ok, "All 10 invariants hold.\n"
	return r
}

func TestWriteReport(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := syntheticResult()
	require.NoError(t, WriteReport(dir, r))

	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	require.NoError(t, err)
	for _, id := range ChartIDs {
		require.Regexp(t, regexp.MustCompile(`(?s)<figure id="`+id+`" class="chart">\s*<svg .*?</svg>`), string(html))
	}
	require.NotContains(t, string(html), "<?xml", "SVG prologs do not belong inside HTML")
	require.Contains(t, string(html), "relay-1 killed")
	require.Contains(t, string(html), `class="verdict ok"`)

	f, err := os.Open(filepath.Join(dir, "summary.png"))
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	require.Greater(t, img.Bounds().Dx(), 600)

	raw, err := os.ReadFile(filepath.Join(dir, "result.json"))
	require.NoError(t, err)
	var back Result
	require.NoError(t, json.Unmarshal(raw, &back))
	require.Len(t, back.Series, len(r.Series))
}

func TestResultOK(t *testing.T) {
	t.Parallel()
	bad, good := false, true
	tests := []struct {
		name string
		sum  Summary
		seat int
		ok   *bool
		want bool
	}{
		{"AllGood", Summary{Sold: 40}, 40, &good, true},
		{"NoAudit", Summary{Sold: 40}, 40, nil, true},
		{"Oversold", Summary{Sold: 40, Oversold: 1}, 40, &good, false},
		{"MoreSoldThanSeats", Summary{Sold: 41}, 40, &good, false},
		{"AuditFailed", Summary{Sold: 3}, 40, &bad, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &Result{Seats: tt.seat, Summary: tt.sum, AuditOK: tt.ok}
			require.Equal(t, tt.want, r.OK())
			var buf bytes.Buffer
			require.NoError(t, r.WriteSummary(&buf))
			require.True(t, strings.Contains(buf.String(), "oversold"))
		})
	}
}

func TestProgress(t *testing.T) {
	t.Parallel()
	sim, err := New(Config{APIs: []string{"http://127.0.0.1:1"}, JWTSecret: []byte("x"), Buyers: 10, Seats: 5, PayRatio: 0.9})
	require.NoError(t, err)
	sim.c.queued.Store(3)
	sim.c.ticketed.Store(7) // more than seats: the bar grows

	t.Run("Bars", func(t *testing.T) {
		t.Parallel()
		var buf testkit.Buffer
		stop := StartProgress(sim, &buf, true, time.Hour)
		buf.WaitFor(t, 5*time.Second, "errors")
		stop()
		out := buf.String()
		for _, name := range []string{"queued", "admitted", "holding", "paid", "ticketed", "R ", "errors"} {
			require.Contains(t, out, name)
		}
	})
	t.Run("PlainLines", func(t *testing.T) {
		t.Parallel()
		var buf testkit.Buffer
		stop := StartProgress(sim, &buf, false, 10*time.Millisecond)
		buf.WaitFor(t, 5*time.Second, "queued=3")
		stop()
		require.Contains(t, buf.String(), "ticketed=7")
	})
}
