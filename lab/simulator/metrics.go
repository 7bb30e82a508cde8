package simulator

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// counters are the live counts of a run, updated by buyers and read by
// the sampler and the progress display. Gauges go up and down; the rest
// only go up.
type counters struct {
	arrived   atomic.Int64
	queued    atomic.Int64 // gauge: in the waiting room
	admitted  atomic.Int64
	holding   atomic.Int64 // gauge: holding seats, not yet paid, declined or walked away
	holds     atomic.Int64
	bestHolds atomic.Int64 // of holds, those of best-available buyers
	paid      atomic.Int64
	ticketed  atomic.Int64
	failed    atomic.Int64
	declined  atomic.Int64
	abandoned atomic.Int64
	soldOut   atomic.Int64
	gaveUp    atomic.Int64
	conflicts atomic.Int64
	retries   atomic.Int64
	errors    atomic.Int64
	done      atomic.Int64
	room      atomic.Int64 // waiting-room requests sent: joins and polls
}

// latencies records durations in milliseconds: all of them for the
// summary, and those since the last drain for the per-second series.
type latencies struct {
	mu     sync.Mutex
	all    []float64
	window []float64
}

func (l *latencies) add(d time.Duration) {
	ms := float64(d) / float64(time.Millisecond)
	l.mu.Lock()
	l.all = append(l.all, ms)
	l.window = append(l.window, ms)
	l.mu.Unlock()
}

// drain returns the window's durations and starts a new window.
func (l *latencies) drain() []float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.window
	l.window = nil
	return w
}

func (l *latencies) snapshot() []float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.all)
}

// Percentiles are latency percentiles in milliseconds; N is the sample
// count (all zero when N is 0).
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50Ms"`
	P95 float64 `json:"p95Ms"`
	P99 float64 `json:"p99Ms"`
	Max float64 `json:"maxMs"`
}

// percentilesOf computes nearest-rank percentiles of xs (which it sorts).
func percentilesOf(xs []float64) Percentiles {
	if len(xs) == 0 {
		return Percentiles{}
	}
	slices.Sort(xs)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(xs)))) - 1
		return xs[min(max(i, 0), len(xs)-1)]
	}
	return Percentiles{N: len(xs), P50: at(0.50), P95: at(0.95), P99: at(0.99), Max: xs[len(xs)-1]}
}
