package procs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/testkit/procs"
)

// script prints its marker and environment, says so when SIGTERM reaches
// it, and otherwise runs until it is signalled.
const script = `echo "up $MARK $1"; trap 'echo "term $MARK"; exit 0' TERM; while :; do sleep 0.05; done`

func newProc(t *testing.T) *procs.Proc {
	t.Helper()
	p, err := procs.New(procs.Spec{
		Name: "sh", Bin: "/bin/sh", Args: []string{"-c", script, "sh", "arg1"},
		Env: []string{"MARK=m1"}, LogPath: filepath.Join(t.TempDir(), "sh.log"), OwnGroup: true,
	})
	require.NoError(t, err)
	t.Cleanup(func() { p.Stop(); _ = p.Close() })
	return p
}

func readLog(t *testing.T, p *procs.Proc) string {
	t.Helper()
	raw, err := os.ReadFile(p.LogPath())
	require.NoError(t, err)
	return string(raw)
}

func waitLog(t *testing.T, p *procs.Proc, s string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Count(readLog(t, p), s) >= n },
		5*time.Second, 10*time.Millisecond, "log never had %d× %q: %q", n, s, readLog(t, p))
}

func TestKillThenStartAppendsToTheSameLog(t *testing.T) {
	p := newProc(t)
	require.NoError(t, p.Kill(), "kill before start does nothing")
	require.NoError(t, p.Start())
	waitLog(t, p, "up m1 arg1", 1)
	require.NoError(t, p.Kill())
	require.NoError(t, p.Kill(), "a second kill does nothing")
	require.NotContains(t, readLog(t, p), "term", "SIGKILL gives no chance to shut down")

	require.NoError(t, p.Start())
	waitLog(t, p, "up m1 arg1", 2)
}

func TestStopSendsSIGTERMAndWaits(t *testing.T) {
	p := newProc(t)
	require.NoError(t, p.Start())
	waitLog(t, p, "up m1", 1)
	start := time.Now()
	p.Stop()
	require.Less(t, time.Since(start), procs.StopGrace, "the process exited on SIGTERM")
	require.Contains(t, readLog(t, p), "term m1", "Stop returns once the process has handled SIGTERM")
	p.Stop() // stopped already: nothing to do

	require.NoError(t, p.Start(), "a stopped process starts again")
	waitLog(t, p, "up m1", 2)
}

func TestNewFailsOnAnUnwritableLog(t *testing.T) {
	_, err := procs.New(procs.Spec{Name: "x", Bin: "/bin/true", LogPath: filepath.Join(t.TempDir(), "missing", "x.log")})
	require.ErrorContains(t, err, "log of x")
}
