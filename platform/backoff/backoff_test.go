package backoff_test

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"boxoffice/platform/backoff"
)

func TestPolicyDelayWith(t *testing.T) {
	t.Parallel()
	relay := backoff.Policy{Base: 100 * time.Millisecond, Max: 10 * time.Second, Jitter: backoff.Even(0.2)}
	river := backoff.Policy{Base: time.Second, Power: 4, Jitter: backoff.Even(0.1), Limit: 10 * time.Minute}
	for name, tc := range map[string]struct {
		p    backoff.Policy
		n    int
		u    float64
		want time.Duration
	}{
		"Zero":                       {backoff.Policy{}, 3, 0.5, 0},
		"DoublingFirst":              {backoff.Policy{Base: time.Second}, 1, 0, time.Second},
		"DoublingFourth":             {backoff.Policy{Base: time.Second}, 4, 0, 8 * time.Second},
		"AttemptBelowOneCountsAsOne": {backoff.Policy{Base: time.Second}, -3, 0, time.Second},
		"DoublingCapped":             {backoff.Policy{Base: time.Second, Max: 5 * time.Second}, 4, 0, 5 * time.Second},
		"DoublingOverflowSaturates":  {backoff.Policy{Base: time.Second}, 1 << 30, 0, math.MaxInt64},
		"DoublingHugeIsCapped":       {backoff.Policy{Base: time.Second, Max: time.Minute}, math.MaxInt, 0, time.Minute},
		"Linear":                     {backoff.Policy{Base: 100 * time.Millisecond, Power: 1}, 3, 0, 300 * time.Millisecond},
		"FourthPower":                {backoff.Policy{Base: time.Second, Power: 4}, 3, 0, 81 * time.Second},
		"FourthPowerOverflow":        {backoff.Policy{Base: time.Second, Power: 4}, 1 << 40, 0, math.MaxInt64},
		"JitterLowest":               {relay, 2, 0, 160 * time.Millisecond},
		"JitterMiddle":               {relay, 2, 0.5, 200 * time.Millisecond},
		"JitterNearHighest":          {relay, 2, 0.75, 220 * time.Millisecond},
		"JitterSpreadsTheCap":        {relay, 30, 0.75, 11 * time.Second},
		"JitterDownOnly":             {backoff.Policy{Base: time.Second, Jitter: backoff.Jitter{Below: 0.2}}, 1, 0.5, 900 * time.Millisecond},
		"FullJitter":                 {backoff.Policy{Base: 10 * time.Millisecond, Power: 1, Jitter: backoff.Jitter{Below: 1}}, 3, 0.5, 15 * time.Millisecond},
		"LimitAfterJitter":           {river, 5, 0, 562500 * time.Millisecond},
		"LimitBoundsJitterUp":        {river, 5, 0.5, 10 * time.Minute},
		"LimitBoundsOverflow":        {river, 1 << 40, 1, 10 * time.Minute},
		"RiverSecondAttemptUp":       {river, 2, 1, 17600 * time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := tc.p.DelayWith(tc.n, tc.u)
			if diff := got - tc.want; diff < -time.Microsecond || diff > time.Microsecond {
				t.Fatalf("DelayWith(%d, %v) = %v, want %v", tc.n, tc.u, got, tc.want)
			}
		})
	}
}

func TestPolicyNominalIgnoresJitterAndLimit(t *testing.T) {
	t.Parallel()
	p := backoff.Policy{Base: time.Second, Max: time.Minute, Jitter: backoff.Even(0.5), Limit: time.Second}
	for n, want := range map[int]time.Duration{1: time.Second, 3: 4 * time.Second, 7: time.Minute} {
		if got := p.Nominal(n); got != want {
			t.Errorf("Nominal(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestPolicyDelayStaysWithinTheJitter(t *testing.T) {
	t.Parallel()
	p := backoff.Policy{Base: 100 * time.Millisecond, Max: 10 * time.Second, Jitter: backoff.Jitter{Below: 0.2, Above: 0.1}}
	for n := 1; n <= 12; n++ {
		nominal := p.Nominal(n)
		lo, hi := time.Duration(float64(nominal)*0.8), time.Duration(float64(nominal)*1.1)
		for range 200 {
			if d := p.Delay(n); d < lo || d > hi {
				t.Fatalf("Delay(%d) = %v, outside [%v, %v]", n, d, lo, hi)
			}
		}
	}
	if d := (backoff.Policy{Base: time.Second, Max: 3 * time.Second}).Delay(5); d != 3*time.Second {
		t.Fatalf("without jitter Delay(5) = %v, want exactly 3s", d)
	}
}

func TestJitterApply(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		j    backoff.Jitter
		d    time.Duration
		u    float64
		want time.Duration
	}{
		"None":          {backoff.Jitter{}, time.Second, 0.9, time.Second},
		"EvenLowest":    {backoff.Even(0.2), time.Second, 0, 800 * time.Millisecond},
		"EvenMiddle":    {backoff.Even(0.2), time.Second, 0.5, time.Second},
		"DownOnly":      {backoff.Jitter{Below: 0.2}, time.Second, 0.25, 850 * time.Millisecond},
		"NonPositive":   {backoff.Even(0.2), -time.Second, 0, -time.Second},
		"Saturates":     {backoff.Even(0.5), math.MaxInt64, 1, math.MaxInt64},
		"FullJitterLow": {backoff.Jitter{Below: 1}, time.Second, 0, 0},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := tc.j.Apply(tc.d, tc.u)
			if diff := got - tc.want; diff < -time.Microsecond || diff > time.Microsecond {
				t.Fatalf("Apply(%v, %v) = %v, want %v", tc.d, tc.u, got, tc.want)
			}
		})
	}
	if d := backoff.Even(0.2).Random(time.Second); d < 800*time.Millisecond || d >= 1200*time.Millisecond {
		t.Fatalf("Random(1s) = %v, outside [0.8s, 1.2s)", d)
	}
}

// Sleep waits its duration, and no longer than its context lives.
func TestSleepWaitsOrStopsWithItsContext(t *testing.T) {
	t.Parallel()
	if err := backoff.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep with a live context: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A wait of an hour: a done context must end it at once.
	if err := backoff.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep with a done context = %v, want context.Canceled", err)
	}
}

// Every runs its function at once and again after each interval, and
// returns once its context is done.
func TestEveryRunsAtOnceAndAgainUntilItsContextIsDone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runs := make(chan struct{})
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		// An interval of an hour: the first run cannot wait for it.
		backoff.Every(ctx, time.Hour, func(context.Context) { runs <- struct{}{} })
	}()
	select {
	case <-runs:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not run its function at once")
	}
	cancel()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return once its context was done")
	}

	n := 0
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	backoff.Every(ctx2, time.Millisecond, func(context.Context) {
		if n++; n == 3 {
			cancel2()
		}
	})
	if n != 3 {
		t.Fatalf("Every ran %d times, want 3: it runs again after each interval and stops with its context", n)
	}
}

// Ticks waits a period before the first run, runs again each period, and
// returns nil once its context is done, or the first error of a run.
func TestTicksRunsEachPeriodUntilItsContextIsDoneOrAnError(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runs := 0
	start := time.Now()
	err := backoff.Ticks(ctx, 5*time.Millisecond, func(context.Context) error {
		if runs++; runs == 3 {
			cancel()
		}
		return nil
	})
	if err != nil || runs != 3 {
		t.Fatalf("Ticks = %v after %d runs, want nil after 3: it stops with its context", err, runs)
	}
	if elapsed := time.Since(start); elapsed < 15*time.Millisecond {
		t.Fatalf("three runs took %v: the first waits a period, and each run its own", elapsed)
	}

	stop := errors.New("stop")
	runs = 0
	err = backoff.Ticks(context.Background(), time.Millisecond, func(context.Context) error {
		if runs++; runs == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || runs != 2 {
		t.Fatalf("Ticks = %v after %d runs, want the run's error after 2", err, runs)
	}
}

// A context done while a run is in progress, from another goroutine: the
// run finishes, no further run starts, and Ticks returns nil.
func TestTicksStartsNoRunOnceItsContextIsDone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	inRun, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	returned := make(chan error, 1)
	go func() {
		returned <- backoff.Ticks(ctx, time.Millisecond, func(context.Context) error {
			if runs.Add(1) == 1 {
				close(inRun)
				<-release
			}
			return nil
		})
	}()
	<-inRun
	go cancel()
	<-ctx.Done()
	// Hold the run a few periods past the cancel, so that a tick waits
	// beside the done context when it ends: the select may take either,
	// and the tick must not start a run.
	time.Sleep(5 * time.Millisecond)
	close(release)
	select {
	case err := <-returned:
		if err != nil {
			t.Fatalf("Ticks = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Ticks did not return once its context was done")
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d runs, want 1: no run starts once the context is done", n)
	}
}
