package bench_test

import (
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/lab/bench"
)

// A group counts the CPU of the processes added to it and of those they
// fork, after they have exited too; another group counts none of it.
func TestCPUGroupsCountForkedAndExitedProcesses(t *testing.T) {
	g := bench.NewCPUGroups()
	t.Cleanup(g.Close)
	if !g.Exact() {
		t.Skip("no writable cgroup v1 cpuacct here: " + g.Method())
	}
	busy, err := g.Group("busy")
	require.NoError(t, err)
	idle, err := g.Group("idle")
	require.NoError(t, err)
	// The shell forks a child that spins, waits for it, and exits.
	cmd := exec.Command("sh", "-c", "sleep 0.2; sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done'")
	require.NoError(t, cmd.Start())
	require.NoError(t, busy.Add(cmd.Process.Pid))
	require.NoError(t, cmd.Wait())
	require.Greater(t, busy.Usage(), 50*time.Millisecond, "the exited grandchild's spin is counted")
	require.Zero(t, idle.Usage())
}
