package bench

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// Part is one part of a process a CPU profile is split into: a sample
// belongs to the first part (in the order given) one of whose prefixes
// begins the function name of the outermost frame that matches any part.
// So a request's work belongs to the API even where it calls into pgx,
// and a consumer's to the consumer even where it calls the provider.
type Part struct {
	Name     string
	Prefixes []string
}

// CPUShare is the CPU time a profile's samples spent in one Part.
type CPUShare struct {
	Part    string
	Seconds float64
}

// SplitProfile reads a CPU profile (as runtime/pprof writes it) and
// returns the CPU time spent in each of parts, largest first, then that
// of the samples of no part: RuntimePart for those whose every frame is
// the Go runtime's (garbage collection, the scheduler), OtherPart for the
// rest. total is the profile's whole CPU time.
func SplitProfile(raw []byte, parts []Part) (shares []CPUShare, total float64, err error) {
	p, err := profile.Parse(bytes.NewReader(raw))
	if err != nil {
		return nil, 0, fmt.Errorf("parse CPU profile: %w", err)
	}
	value := slices.IndexFunc(p.SampleType, func(st *profile.ValueType) bool { return st.Type == "cpu" })
	if value < 0 {
		return nil, 0, fmt.Errorf("profile has no cpu samples")
	}
	byPart := make([]float64, len(parts)+2)
	for _, s := range p.Sample {
		seconds := float64(s.Value[value]) / 1e9
		total += seconds
		byPart[partOf(s, parts)] += seconds
	}
	fallback := func(name string) bool { return name == RuntimePart || name == OtherPart }
	for i, sec := range byPart {
		name := OtherPart
		switch {
		case i < len(parts):
			name = parts[i].Name
		case i == len(parts):
			name = RuntimePart
		}
		if sec > 0 {
			shares = append(shares, CPUShare{Part: name, Seconds: sec})
		}
	}
	slices.SortStableFunc(shares, func(a, b CPUShare) int {
		if fa, fb := fallback(a.Part), fallback(b.Part); fa != fb {
			if fa {
				return 1
			}
			return -1
		}
		return -cmpFloat(a.Seconds, b.Seconds)
	})
	return shares, total, nil
}

// The parts SplitProfile gives the samples of no Part.
const (
	RuntimePart = "Go runtime (garbage collection, scheduler)"
	OtherPart   = "other"
)

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// partOf is the index of the part a sample belongs to; len(parts) for
// none and only runtime frames, len(parts)+1 for none. Locations run from
// the leaf to the root.
func partOf(s *profile.Sample, parts []Part) int {
	runtimeOnly := true
	for i := len(s.Location) - 1; i >= 0; i-- {
		lines := s.Location[i].Line
		for j := len(lines) - 1; j >= 0; j-- {
			if lines[j].Function == nil {
				continue
			}
			name := lines[j].Function.Name
			runtimeOnly = runtimeOnly && (strings.HasPrefix(name, "runtime.") || strings.HasPrefix(name, "internal/runtime/"))
			for k, part := range parts {
				for _, prefix := range part.Prefixes {
					if strings.HasPrefix(name, prefix) {
						return k
					}
				}
			}
		}
	}
	if runtimeOnly {
		return len(parts)
	}
	return len(parts) + 1
}

// SelfCPU is the CPU time (user and system) this process has used.
func SelfCPU() time.Duration {
	d, _ := ProcessCPU(os.Getpid())
	return d
}

// PostgresCPU is the CPU time used so far by the processes on this machine
// named postgres (the server and its backends, live ones only), and false
// when none can be read: the database runs elsewhere, or /proc is absent.
// The difference of two readings is what the server spent meanwhile,
// short of the backends that exited in between.
func PostgresCPU() (time.Duration, bool) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var total time.Duration
	ok := false
	for _, d := range dirs {
		comm, err := os.ReadFile(filepath.Join(d, "comm"))
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if cpu, err := ProcessCPU(pid); err == nil {
			total += cpu
			ok = true
		}
	}
	return total, ok
}

// MachineCPU is the CPU time every CPU of the machine has been busy so
// far (user, nice, system, irq, softirq and steal of /proc/stat's cpu
// line; not idle or iowait), and false where /proc/stat cannot be read.
// The difference of two readings beside the parts' says how much of the
// machine's work no part accounts for.
func MachineCPU() (time.Duration, bool) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, false
	}
	var ticks int64
	// user nice system idle iowait irq softirq steal
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, false
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, true
}
