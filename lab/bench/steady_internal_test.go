package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The steady state counts what ended within [warmup, duration): not the
// pipeline's filling before it, nor its draining after the buyers stopped
// starting purchases.
func TestSteadyCountLeavesOutTheFillingAndTheDraining(t *testing.T) {
	t.Parallel()
	s := time.Second
	at := []time.Duration{s / 2, 2*s - 1, 2 * s, 5 * s, 10*s - 1, 10 * s, 11 * s}
	c := steadyCount(at, 2*s, 10*s)
	require.Equal(t, SteadyCount{From: 2 * s, To: 10 * s, Ticketed: 3}, c)

	r := PurchaseResult{Elapsed: 12 * s, Ticketed: len(at), Steady: c}
	require.InDelta(t, 3.0/8, r.SteadyPerSec(), 1e-9)
	require.InDelta(t, 7.0/12, r.TicketedPerSec(), 1e-9)

	for _, w := range []time.Duration{0, 10 * s, 11 * s} {
		none := steadyCount(at, w, 10*s)
		require.Zero(t, none, "warm-up %s", w)
		require.Equal(t, PurchaseResult{Elapsed: 12 * s, Ticketed: 7, Steady: none}.TicketedPerSec(),
			PurchaseResult{Elapsed: 12 * s, Ticketed: 7, Steady: none}.SteadyPerSec(), "no steady state: the whole run's rate")
	}
}
