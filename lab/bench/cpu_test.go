package bench

import (
	"bytes"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// spinForCPUTest burns d of this process's CPU time, however busy the
// machine is.
//
//go:noinline
func spinForCPUTest(d time.Duration) int {
	n := 0
	for start := SelfCPU(); SelfCPU()-start < d; {
		for i := range 1_000_000 {
			n += i ^ n
		}
	}
	return n
}

// A profile's samples go to the part of their outermost matching frame,
// as measured by the process's own CPU reading.
func TestSplitProfileAndProcessCPU(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, pprof.StartCPUProfile(&buf))
	spinForCPUTest(400 * time.Millisecond)
	pprof.StopCPUProfile()

	shares, total, err := SplitProfile(buf.Bytes(), []Part{
		{Name: "nothing", Prefixes: []string{"example.com/"}},
		{Name: "spin", Prefixes: []string{"boxoffice/lab/bench.spinForCPUTest"}},
	})
	require.NoError(t, err)
	require.Greater(t, total, 0.1)
	require.NotEmpty(t, shares)
	require.Equal(t, "spin", shares[0].Part)
	require.Greater(t, shares[0].Seconds, total/2)
	for _, s := range shares {
		require.NotEqual(t, "nothing", s.Part)
	}
}
