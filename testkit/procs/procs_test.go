package procs_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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

// freePortsChild, set in a child's environment, makes TestMain print that
// many ports from FreePort and hold them (its blocks stay locked) until
// its stdin closes.
const freePortsChild = "PROCS_TEST_FREE_PORTS"

func TestMain(m *testing.M) {
	if n, err := strconv.Atoi(os.Getenv(freePortsChild)); err == nil {
		for range n {
			port, err := procs.FreePort()
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			fmt.Println(port)
		}
		fmt.Println("done")
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Two processes that start their stacks at once (two simulators, two test
// binaries) each take ports from FreePort: no port goes to both, so
// neither stack's process finds its port taken by the other's. 300 random
// ports each from the 12,000 below the ephemeral range would share about
// seven.
func TestFreePortNeverHandsOutAnotherProcesssPort(t *testing.T) {
	const n = 300
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   *bufio.Scanner
	}
	var children []child
	for range 2 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", freePortsChild, n))
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
		children = append(children, child{cmd, stdin, bufio.NewScanner(stdout)})
	}

	owner := map[int]string{}
	take := func(who string, port int) {
		t.Helper()
		require.Empty(t, owner[port], "port %d went to %s and to %s", port, owner[port], who)
		require.True(t, port >= 20000 && port < 32000, "port %d is outside [20000, 32000)", port)
		owner[port] = who
	}
	for range n {
		port, err := procs.FreePort()
		require.NoError(t, err)
		take("this process", port)
	}
	for i, c := range children {
		for c.out.Scan() && c.out.Text() != "done" {
			port, err := strconv.Atoi(c.out.Text())
			require.NoError(t, err)
			take(fmt.Sprintf("child %d", i+1), port)
		}
		require.NoError(t, c.out.Err())
	}
	require.Len(t, owner, 3*n)
}

// A process that exits before it is ready (its port taken, a bad setting)
// ends the wait at once, and the error carries the end of its log: the
// caller's output is all a CI run keeps. A ready URL ends it with no error.
func TestWaitHTTPGivesUpWhenTheProcessExits(t *testing.T) {
	dir := t.TempDir()
	p, err := procs.New(procs.Spec{Name: "nats-2", Bin: "/bin/sh",
		Args:    []string{"-c", `echo "first line"; echo "Error listening on router port: 6222"; exit 1`},
		LogPath: filepath.Join(dir, "nats-2.log")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	require.False(t, p.Exited(), "not started yet")
	require.NoError(t, p.Start())
	port, err := procs.FreePort()
	require.NoError(t, err)

	err = procs.WaitHTTP(t.Context(), p, fmt.Sprintf("http://127.0.0.1:%d/healthz", port), time.Hour)
	require.ErrorContains(t, err, "nats-2 exited before")
	require.ErrorContains(t, err, "Error listening on router port: 6222")
	require.True(t, p.Exited())
	require.NoError(t, p.Kill(), "killing an exited process does nothing")
	p.Stop()

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(srv.Close)
	ready := newProc(t)
	require.NoError(t, ready.Start())
	require.NoError(t, procs.WaitHTTP(t.Context(), ready, srv.URL, time.Hour))
}
