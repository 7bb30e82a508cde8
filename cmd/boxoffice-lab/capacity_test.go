package main

import (
	"bytes"
	"flag"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/cmd/boxoffice/roles"
	"boxoffice/lab/capacity"
)

// sampleCostsFile writes the costs docs/capacity.md works its example
// with, the abandoned hold left to its default, and returns its path.
func sampleCostsFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "costs.json")
	require.NoError(t, capacity.Costs{
		MachineCores: 2, TicketedPerSec: 93, PostgresMsPerOrder: 11.3, ProductMsPerOrder: 8.7, APIMsPerOrder: 2.6,
		WorkerMsPerOrder: 6.1, BuyersMsPerOrder: 0.7, StripeMsPerOrder: 3.0, RoundTripsPerOrder: 94, EventsPerOrder: 9,
		EventBytesAvg: 900, MeasuredAt: time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC),
		Source: "boxoffice-lab bench purchases -duration 10s -costs-out costs.json",
	}.Save(path))
	return path
}

func TestCapacityCommand(t *testing.T) {
	t.Parallel()
	costs := sampleCostsFile(t)
	cases := []struct {
		name  string
		args  []string
		lines []string
	}{
		{"PlansTheSeedsOnsaleFromACostsFile", []string{"-costs", costs}, []string{
			`postgresMsPerOrder\s+11\.3 ms\s+` + regexp.QuoteMeta(costs),
			`abandonedHoldPostgresMs\s+2\.825 ms\s+unknown: 0\.25 × postgresMsPerOrder`,
			`measured\s+2026-12-02 09:00 UTC\s+boxoffice-lab bench purchases`,
			`target R, admitted/s\s+800\s+500 orders/s`,
			`seat lock attempts/s\s+1,920\s`,
			`PostgreSQL per admitted buyer\s+8\.12 ms`,
			`R one cell sustains\s+1,379 admitted/s`,
			`cells\s+1\s+fits one cell at 58% of its R`,
			`API tasks \(2 cores\)\s+2\s+0\.93 needed`,
			`worker tasks \(2 cores\)\s+3\s+2\.18 needed`,
			`connections\s+90 of 100\s+fits: .*largest pool that fits 18`,
			`JetStream events/s\s+4,500\s`,
			`stream stored per cell\s+7,348\.3 GB`,
			`predicted ticketed/s\s+84\.4\s`,
			`predicted ÷ measured\s+0\.91\s+within 25%`,
		}},
		{"LetsFlagsOverrideTheFile", []string{"-costs", costs, "-stripe-ms-per-order", "30", "-writer-cores", "8", "-max-connections", "50"}, []string{
			`stripeMsPerOrder\s+30 ms\s+-stripe-ms-per-order`,
			// 8 × 1000 × 0.7 ÷ 8.121875 = 689.5: two cells of 400 admitted/s.
			`R one cell sustains\s+689 admitted/s`,
			`cells\s+2\s+one event sells in one cell: 2 cells .* a writer of 9\.3 cores, or R held at 689/s`,
			`per cell\s+400 admitted/s\s+250 orders/s`,
			`connections\s+74 of 50\s+OVER by 24: \(2 \+ 2 tasks\) × pool 16 \+ 10 ops; largest pool that fits 10`,
			// 2000 ÷ (11.3 + 8.7 + 0.7 + 30) = 39.4 against 93.
			`predicted ÷ measured\s+0\.42\s+NOT within 25%`,
		}},
		{"TakesTheTargetAsOrders", []string{"-costs", costs, "-orders", "250"}, []string{
			`target R, admitted/s\s+400\s+250 orders/s`,
		}},
		{"PlansFromFlagsAlone", []string{"-postgres-ms-per-order", "10", "-product-ms-per-order", "8"}, []string{
			`apiMsPerOrder\s+4 ms\s+unknown: half of productMsPerOrder`,
			`roundTripsPerOrder\s+0\s+not given`,
			`not made\s+the costs do not give machineCores`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			require.NoError(t, runCapacity(tc.args, &out))
			for _, line := range tc.lines {
				require.Regexp(t, regexp.MustCompile(`(?m)^\s*`+line), out.String())
			}
		})
	}
}

// -h is help (exit 0); a flag or figure that cannot be planned with is a
// usage error (exit 2) and prints nothing; an unreadable file is a failure.
func TestCapacityCommandRefusesBadFlags(t *testing.T) {
	t.Parallel()
	costs := sampleCostsFile(t)
	require.ErrorIs(t, runCapacity([]string{"-h"}, &bytes.Buffer{}), flag.ErrHelp)
	for _, args := range [][]string{
		{"-costs", costs, "-no-such-flag"},
		{"-costs", costs, "-pay-ratio", "much"},
		{"-costs", costs, "-pay-ratio", "1.5"},
		{"-costs", costs, "-admitted", "800", "-orders", "500"},
		{"-costs", costs, "-stream-replicas", "0"},
		{"-costs", costs, "-postgres-ms-per-order", "-1"},
		{}, // no costs at all
	} {
		var out bytes.Buffer
		err := runCapacity(args, &out)
		var usage *roles.UsageError
		require.ErrorAs(t, err, &usage, "%v", args)
		require.Empty(t, out.String(), "%v", args)
	}
	err := runCapacity([]string{"-costs", filepath.Join(t.TempDir(), "missing.json")}, &bytes.Buffer{})
	require.Error(t, err)
	var usage *roles.UsageError
	require.NotErrorAs(t, err, &usage)
}
