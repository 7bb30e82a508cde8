package webhooks

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBreaker(t *testing.T) {
	t.Parallel()

	const (
		threshold = 3
		cooldown  = 30 * time.Second
	)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	// step is one thing done to the breaker at t0+at: an attempt's outcome
	// recorded (fail, succeed), or an attempt asked for (allow, with
	// inflight others out), started (begin) or ended (end) — the last
	// three as the dispatcher does them for one attempt.
	type step struct {
		at       time.Duration
		do       string // "fail", "succeed", "allow", "start", "end"
		inflight int
		// For "allow" and "start": what allow answers.
		wantProbe  bool
		wantReason string
		wantWait   time.Duration
		// For "fail": whether the failure (re)opened the circuit.
		wantOpened bool
		// For every step: the state after it.
		wantState string
	}
	// fails is n failures recorded on a closed circuit.
	fails := func(n int) []step {
		var out []step
		for i := range n {
			s := step{do: "fail", wantState: circuitClosed}
			if i+1 >= threshold {
				s.wantOpened, s.wantState = true, circuitOpen
			}
			out = append(out, s)
		}
		return out
	}
	opened := fails(threshold)
	cat := func(parts ...[]step) []step {
		var out []step
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}

	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "ClosedLetsEveryAttemptThrough",
			steps: []step{
				{do: "start", wantState: circuitClosed},
				{do: "allow", inflight: 5, wantState: circuitClosed},
			},
		},
		{
			name: "ClosedOpensAfterThresholdFailures",
			steps: cat(fails(threshold-1), []step{
				{do: "allow", wantState: circuitClosed},
				{do: "fail", wantOpened: true, wantState: circuitOpen},
				{do: "allow", wantReason: reasonCircuitOpen, wantWait: cooldown, wantState: circuitOpen},
				{at: cooldown - time.Second, do: "allow", wantReason: reasonCircuitOpen, wantWait: time.Second, wantState: circuitOpen},
			}),
		},
		{
			name: "SuccessForgetsTheRunOfFailures",
			steps: cat(fails(threshold-1), []step{
				{do: "succeed", wantState: circuitClosed},
			}, fails(threshold-1), []step{
				{do: "allow", wantState: circuitClosed},
			}),
		},
		{
			name: "HalfOpenAfterCooldownLetsOneProbeThrough",
			steps: cat(opened, []step{
				{at: cooldown, do: "start", wantProbe: true, wantState: circuitHalfOpen},
				{at: cooldown, do: "allow", wantReason: reasonCircuitHalfOpen, wantState: circuitHalfOpen},
			}),
		},
		{
			name: "NoSecondProbeWhileOneIsInFlight",
			steps: cat(opened, []step{
				{at: cooldown, do: "start", wantProbe: true, wantState: circuitHalfOpen},
				// Even once the endpoint's other attempts have ended.
				{at: cooldown + time.Minute, do: "allow", inflight: 0, wantReason: reasonCircuitHalfOpen, wantState: circuitHalfOpen},
				{at: cooldown + time.Minute, do: "end", wantState: circuitHalfOpen},
				// The probe ended without an outcome recorded yet: the
				// next attempt may probe.
				{at: cooldown + time.Minute, do: "allow", wantProbe: true, wantState: circuitHalfOpen},
			}),
		},
		{
			name: "NoProbeWhileOtherAttemptsAreInFlight",
			steps: cat(opened, []step{
				{at: cooldown, do: "allow", inflight: 1, wantReason: reasonCircuitHalfOpen, wantState: circuitHalfOpen},
				{at: cooldown, do: "allow", inflight: 0, wantProbe: true, wantState: circuitHalfOpen},
			}),
		},
		{
			name: "ProbeSuccessCloses",
			steps: cat(opened, []step{
				{at: cooldown, do: "start", wantProbe: true, wantState: circuitHalfOpen},
				{at: cooldown, do: "end", wantState: circuitHalfOpen},
				{at: cooldown, do: "succeed", wantState: circuitClosed},
				{at: cooldown, do: "allow", inflight: 3, wantState: circuitClosed},
			}, fails(threshold-1)),
		},
		{
			name: "ProbeFailureReopens",
			steps: cat(opened, []step{
				{at: cooldown, do: "start", wantProbe: true, wantState: circuitHalfOpen},
				{at: cooldown, do: "end", wantState: circuitHalfOpen},
				{at: cooldown, do: "fail", wantOpened: true, wantState: circuitOpen},
				{at: cooldown, do: "allow", wantReason: reasonCircuitOpen, wantWait: cooldown, wantState: circuitOpen},
				{at: 2*cooldown - time.Second, do: "allow", wantReason: reasonCircuitOpen, wantWait: time.Second, wantState: circuitOpen},
				{at: 2 * cooldown, do: "allow", wantProbe: true, wantState: circuitHalfOpen},
			}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBreaker(DispatcherConfig{CircuitThreshold: threshold, CircuitCooldown: cooldown})
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				switch s.do {
				case "fail":
					require.Equal(t, s.wantOpened, b.record(now, false), "step %d: opened", i)
				case "succeed":
					require.False(t, b.record(now, true), "step %d: a success opens nothing", i)
				case "allow", "start":
					probe, wait, reason := b.allow(now, s.inflight)
					require.Equal(t, s.wantReason, reason, "step %d: reason", i)
					require.Equal(t, s.wantProbe, probe, "step %d: probe", i)
					require.Equal(t, s.wantWait, wait, "step %d: wait", i)
					if s.do == "start" {
						require.Empty(t, reason, "step %d: only an allowed attempt starts", i)
						b.begin(probe)
					}
				case "end":
					b.end(true)
				default:
					t.Fatalf("step %d: unknown step %q", i, s.do)
				}
				require.Equal(t, s.wantState, b.state(now), "step %d: state", i)
			}
		})
	}
}

func TestBreakerLoad(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	later, earlier := now.Add(time.Second), now.Add(-time.Second)
	tests := []struct {
		name      string
		state     string
		openUntil *time.Time
		want      string
	}{
		{"ClosedRow", circuitClosed, nil, circuitClosed},
		{"OpenRowBeforeItsCooldownEnds", circuitOpen, &later, circuitOpen},
		{"OpenRowPastItsCooldown", circuitOpen, &earlier, circuitHalfOpen},
		{"OpenRowWithoutAnEnd", circuitOpen, nil, circuitHalfOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBreaker(DispatcherConfig{CircuitThreshold: 1, CircuitCooldown: time.Minute})
			b.begin(true)
			b.load(tt.state, tt.openUntil, 0)
			require.Equal(t, tt.want, b.state(now))
			require.False(t, b.idle(), "loading the row keeps the probe this dispatcher has out")
		})
	}
}
