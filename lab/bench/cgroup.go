package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// cpuacctRoot is where a cgroup v1 cpuacct hierarchy is mounted.
const cpuacctRoot = "/sys/fs/cgroup/cpuacct"

// CPUGroups measures the CPU time of sets of processes, one set per part
// of a benchmark (PostgreSQL's server, the product, the Stripe stand-in,
// the buyers, pgbench). Where a cgroup v1 cpuacct hierarchy is mounted and
// writable (as root), each set is a cgroup under
// /sys/fs/cgroup/cpuacct/boxoffice-bench-<pid>/: every process forked
// inside one is counted too, exited ones included, to the nanosecond. Elsewhere
// (cgroup v2 only, not root) each set falls back to the counters of
// /proc/<pid>/stat of the processes added, with those of their waited-for
// children: a server's exited backends are counted through their parent,
// but the live descendants of an added process are not unless added.
type CPUGroups struct {
	dir string // "" for the /proc fallback
}

// CPUGroup is one set of CPUGroups.
type CPUGroup struct {
	dir  string
	pids []int
}

// NewCPUGroups creates the parent cgroup, or returns groups that fall back
// to /proc; Exact says which.
func NewCPUGroups() *CPUGroups {
	dir := filepath.Join(cpuacctRoot, "boxoffice-bench-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return &CPUGroups{}
	}
	if _, err := os.Stat(filepath.Join(dir, "cpuacct.usage")); err != nil {
		_ = os.Remove(dir)
		return &CPUGroups{}
	}
	return &CPUGroups{dir: dir}
}

// Exact reports whether the groups are cgroups.
func (g *CPUGroups) Exact() bool { return g.dir != "" }

// Method says how the groups measure, for a report.
func (g *CPUGroups) Method() string {
	if g.Exact() {
		return "cgroup v1 cpuacct (" + g.dir + ")"
	}
	return "/proc/<pid>/stat of each part's processes (no writable cgroup v1 cpuacct here)"
}

// Group returns the named set, creating its cgroup.
func (g *CPUGroups) Group(name string) (*CPUGroup, error) {
	if !g.Exact() {
		return &CPUGroup{}, nil
	}
	dir := filepath.Join(g.dir, name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("create cgroup %s: %w", name, err)
	}
	return &CPUGroup{dir: dir}, nil
}

// Close moves every process left in the groups back to the root cgroup
// and removes the groups.
func (g *CPUGroups) Close() {
	if !g.Exact() {
		return
	}
	subs, _ := os.ReadDir(g.dir)
	for _, s := range subs {
		if !s.IsDir() {
			continue
		}
		dir := filepath.Join(g.dir, s.Name())
		for _, pid := range readPids(dir) {
			_ = os.WriteFile(filepath.Join(cpuacctRoot, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		}
		_ = os.Remove(dir)
	}
	_ = os.Remove(g.dir)
}

// Add puts process pid (all its threads) in the set; the processes it
// forks from then on are counted with it.
func (c *CPUGroup) Add(pid int) error {
	c.pids = append(c.pids, pid)
	if c.dir == "" {
		return nil
	}
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("move %d into cgroup: %w", pid, err)
	}
	return nil
}

// AddTree adds pid and the processes it has already forked (a
// PostgreSQL postmaster and its background processes).
func (c *CPUGroup) AddTree(pid int) error {
	if err := c.Add(pid); err != nil {
		return err
	}
	for _, child := range children(pid) {
		if err := c.AddTree(child); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Usage is the CPU time (user and system) the set has used so far.
func (c *CPUGroup) Usage() time.Duration {
	if c.dir != "" {
		raw, err := os.ReadFile(filepath.Join(c.dir, "cpuacct.usage"))
		if err == nil {
			if ns, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64); err == nil {
				return time.Duration(ns)
			}
		}
	}
	var total time.Duration
	for _, pid := range c.pids {
		total += treeCPU(pid)
	}
	return total
}

// treeCPU is pid's CPU with that of its waited-for children and of its
// live descendants.
func treeCPU(pid int) time.Duration {
	d, err := processCPUWithChildren(pid)
	if err != nil {
		return 0
	}
	for _, child := range children(pid) {
		d += treeCPU(child)
	}
	return d
}

// processCPUWithChildren is utime+stime+cutime+cstime of /proc/<pid>/stat.
func processCPUWithChildren(pid int) (time.Duration, error) { return statCPU(pid, 4) }

// children are the live processes whose parent is pid.
func children(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, t := range tasks {
		raw, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(raw)) {
			if n, err := strconv.Atoi(s); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

func readPids(dir string) []int {
	raw, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []int
	for _, s := range strings.Fields(string(raw)) {
		if n, err := strconv.Atoi(s); err == nil {
			out = append(out, n)
		}
	}
	return out
}
