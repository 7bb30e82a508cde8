package simulator

import (
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"time"

	"boxoffice/lab/bench"
)

// The parts of a run whose CPU a CPUMeter reads apart, each a CPU group
// of its own (bench.CPUGroups): the run's PostgreSQL backends, the NATS
// nodes, the product's roles by kind, the Stripe stand-in (when the stack
// pays through it) and the simulator (this process: the buyers).
const (
	PartPostgres  = "postgres (the run's backends)"
	PartNATS      = "nats (3 nodes)"
	PartAPI       = "api"
	PartRelay     = "relay"
	PartWorkers   = "workers"
	PartStripe    = "stripe (the stand-in)"
	PartSimulator = "simulator (the buyers)"
)

// The readings beside the parts: every postgres process on the machine
// (the server's background processes and other databases' backends
// included, exited backends not), the machine's busy CPU, and what of it
// no part accounts for (Go's toolchain, other users of the machine, the
// server's background processes, Redis).
const (
	PartPostgresServer = "postgres, whole server (live processes, /proc)"
	PartMachine        = "machine (busy, /proc/stat)"
	PartUnaccounted    = "machine, in no part"
)

// cpuParts are the grouped parts in report order.
var cpuParts = []string{PartPostgres, PartNATS, PartAPI, PartRelay, PartWorkers, PartStripe, PartSimulator}

// CPUMeter puts the processes of a run in CPU groups by part and reads
// them. Where cgroup v1 cpuacct is writable (as root) each part is a
// cgroup, counted to the nanosecond with every process that exited;
// elsewhere it falls back to /proc/<pid>/stat of the processes added
// (bench.CPUGroups), and a process killed and restarted loses what it
// used before. The PostgreSQL server is not the run's: its backends are
// added by pid as they appear (AddBackends, from pg_stat_activity), so
// the postgres part counts the CPU they used from then on, and the
// server's background processes (checkpointer, WAL writer, autovacuum
// launcher) only in PartPostgresServer.
type CPUMeter struct {
	groups *bench.CPUGroups
	parts  map[string]*bench.CPUGroup

	mu       sync.Mutex
	backends map[int]bool
}

// NewCPUMeter creates the groups. Close removes them.
func NewCPUMeter() (*CPUMeter, error) {
	m := &CPUMeter{groups: bench.NewCPUGroups(), parts: map[string]*bench.CPUGroup{}, backends: map[int]bool{}}
	for _, name := range cpuParts {
		g, err := m.groups.Group(strings.NewReplacer(" ", "-", "(", "", ")", "", "'", "").Replace(name))
		if err != nil {
			m.groups.Close()
			return nil, err
		}
		m.parts[name] = g
	}
	return m, nil
}

// Method says how the parts are measured, for the summary.
func (m *CPUMeter) Method() string { return m.groups.Method() }

// Close moves every process back to the root group and removes the
// groups.
func (m *CPUMeter) Close() { m.groups.Close() }

// Place puts a stack process (nats-N, stripe, api-N, relay-N, worker-N, as Stack
// names them) in its part's group; it is a StackConfig.StartedFunc.
func (m *CPUMeter) Place(name string, pid int) error {
	part := ""
	switch {
	case strings.HasPrefix(name, "nats-"):
		part = PartNATS
	case strings.HasPrefix(name, "api-"):
		part = PartAPI
	case strings.HasPrefix(name, "relay-"):
		part = PartRelay
	case strings.HasPrefix(name, "worker-"):
		part = PartWorkers
	case name == "stripe":
		part = PartStripe
	default:
		return fmt.Errorf("cpu meter: no part for process %q", name)
	}
	return m.parts[part].Add(pid)
}

// AddSelf puts this process, the simulated buyers, in its group.
func (m *CPUMeter) AddSelf(pid int) error { return m.parts[PartSimulator].Add(pid) }

// AddBackends puts the PostgreSQL backends with these pids in the
// postgres group, each once. A pid that is not on this machine (a remote
// server) or has exited is skipped.
func (m *CPUMeter) AddBackends(pids []int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, pid := range pids {
		if m.backends[pid] {
			continue
		}
		m.backends[pid] = true
		_ = m.parts[PartPostgres].Add(pid)
	}
}

// CPUReading is every part's CPU used so far, at one moment.
type CPUReading struct {
	At    time.Time
	Parts map[string]time.Duration
}

// Read reads every part, the whole PostgreSQL server and the machine.
func (m *CPUMeter) Read() CPUReading {
	r := CPUReading{At: time.Now(), Parts: map[string]time.Duration{}}
	for name, g := range m.parts {
		r.Parts[name] = g.Usage()
	}
	if d, ok := bench.PostgresCPU(); ok {
		r.Parts[PartPostgresServer] = d
	}
	if d, ok := bench.MachineCPU(); ok {
		r.Parts[PartMachine] = d
	}
	return r
}

// CPUReport is what each part of a run used of the machine.
type CPUReport struct {
	// Method says how the parts were measured.
	Method string `json:"method"`
	// Cores is the machine's CPUs: a share of 1 is all of them.
	Cores int `json:"cores"`
	// Windows are the opening (the first OpeningWindow of the run, or
	// the arrivals if shorter: the spike's first joins and holds), the
	// arrivals (from the start for the arrival window, --duration) and
	// the whole run (to the last buyer done and the last walked-away
	// hold expired).
	Windows []CPUWindow `json:"windows"`
}

// CPUWindow is each part's CPU over one window of a run.
type CPUWindow struct {
	Name    string    `json:"name"`
	Seconds float64   `json:"seconds"`
	Parts   []PartCPU `json:"parts"`
}

// PartCPU is one part's CPU over a window: seconds of CPU, and its share
// of the machine (CPU seconds ÷ (the window's seconds × cores)).
type PartCPU struct {
	Part       string  `json:"part"`
	CPUSeconds float64 `json:"cpuSeconds"`
	Share      float64 `json:"share"`
}

// OpeningWindow is how much of a run's start the report's opening
// window covers: where a spike's first holds wait behind its first
// joins.
const OpeningWindow = 10 * time.Second

// NewCPUReport builds the report from a reading at the start, one at the
// end of the opening window (OpeningWindow, or the arrivals if shorter),
// one at the end of the arrival window and one at the end of the run.
func NewCPUReport(method string, start, opening, arrivals, end CPUReading) *CPUReport {
	r := &CPUReport{Method: method, Cores: runtime.NumCPU()}
	r.Windows = append(r.Windows, cpuWindow("opening", start, opening, r.Cores),
		cpuWindow("arrivals", start, arrivals, r.Cores), cpuWindow("run", start, end, r.Cores))
	return r
}

func cpuWindow(name string, a, b CPUReading, cores int) CPUWindow {
	w := CPUWindow{Name: name, Seconds: b.At.Sub(a.At).Seconds()}
	part := func(p string, d time.Duration) {
		share := 0.0
		if w.Seconds > 0 {
			share = d.Seconds() / (w.Seconds * float64(cores))
		}
		w.Parts = append(w.Parts, PartCPU{Part: p, CPUSeconds: d.Seconds(), Share: share})
	}
	var inParts time.Duration
	for _, p := range cpuParts {
		d := b.Parts[p] - a.Parts[p]
		inParts += d
		part(p, d)
	}
	if _, ok := b.Parts[PartPostgresServer]; ok {
		part(PartPostgresServer, b.Parts[PartPostgresServer]-a.Parts[PartPostgresServer])
	}
	if _, ok := b.Parts[PartMachine]; ok {
		machine := b.Parts[PartMachine] - a.Parts[PartMachine]
		part(PartMachine, machine)
		part(PartUnaccounted, max(0, machine-inParts))
	}
	return w
}

// write writes the report for the summary.
func (r *CPUReport) write(b io.Writer) {
	fmt.Fprintf(b, "  CPU by part       %s, %d cores; share = CPU ÷ (window × cores)\n", r.Method, r.Cores)
	for _, w := range r.Windows {
		fmt.Fprintf(b, "    %s window (%.0fs)\n", w.Name, w.Seconds)
		for _, p := range w.Parts {
			fmt.Fprintf(b, "      %-48s %7.1fs  %5.1f%%\n", p.Part, p.CPUSeconds, 100*p.Share)
		}
	}
}
