// Package backoff is the one place retry delays are computed: how long to
// wait after n failed attempts, growing with n, capped, and spread by
// jitter so that processes failing together do not retry together.
//
// A Policy's delay after n ≥ 1 failed attempts (n < 1 counts as 1) is
//
//	grown(n)  = Base·2^(n-1)        when Power is 0 (doubling)
//	          = Base·n^Power        when Power ≥ 1 (n, n², …, n⁴)
//	capped(n) = min(grown(n), Max)  (Max 0: no cap)
//	Delay(n)  = min(capped(n)·f, Limit), f uniform in [1-Jitter.Below, 1+Jitter.Above)
//	                                (Limit 0: no limit)
//
// Max caps the growth before the jitter, so capped retries are still
// spread; Limit bounds the result after it, so no delay ever exceeds
// Limit. Every result is in [0, math.MaxInt64]: growth that overflows
// saturates instead of wrapping, whatever n is.
package backoff

import (
	"context"
	"math"
	"math/rand/v2"
	"time"
)

// Policy is a retry schedule; see the package comment for its formula.
// The zero Policy waits 0. A Policy is a value: it is safe for concurrent
// use and cheap to copy.
type Policy struct {
	// Base is the delay after the first failed attempt, before jitter.
	Base time.Duration
	// Power selects the growth: 0 doubles the delay with each failure,
	// k ≥ 1 makes it Base·n^k.
	Power int
	// Max caps the grown delay before the jitter spreads it; 0 means no
	// cap.
	Max time.Duration
	// Jitter spreads the capped delay.
	Jitter Jitter
	// Limit bounds the delay after the jitter; 0 means no limit.
	Limit time.Duration
}

// Jitter multiplies a delay by a factor drawn uniformly from
// [1-Below, 1+Above). The zero Jitter leaves delays as they are; Below 1
// with Above 0 is "full jitter" (uniform in [0, d)). Below must not exceed
// 1.
type Jitter struct {
	Below, Above float64
}

// Even is the jitter that spreads a delay by ±f of itself.
func Even(f float64) Jitter { return Jitter{Below: f, Above: f} }

// Nominal is the delay after n failed attempts before jitter and Limit:
// capped(n) of the package comment.
func (p Policy) Nominal(n int) time.Duration {
	return duration(p.capped(n))
}

// Delay is the delay after n failed attempts, its jitter drawn from the
// process-wide source of math/rand/v2.
func (p Policy) Delay(n int) time.Duration {
	if p.Jitter == (Jitter{}) {
		return p.DelayWith(n, 0)
	}
	return p.DelayWith(n, rand.Float64())
}

// DelayWith is Delay with the jitter's draw given: u in [0, 1) picks the
// factor 1-Below + u·(Below+Above), so u = 0 gives the shortest delay.
// It is for callers with their own random source (a seeded simulation)
// and for tests.
func (p Policy) DelayWith(n int, u float64) time.Duration {
	d := p.Jitter.scale(p.capped(n), u)
	if p.Limit > 0 && d >= float64(p.Limit) {
		return p.Limit
	}
	return duration(d)
}

// Apply spreads d by j with the draw u in [0, 1) (see Policy.DelayWith).
// A d ≤ 0 is returned as it is; the result saturates at math.MaxInt64.
func (j Jitter) Apply(d time.Duration, u float64) time.Duration {
	if d <= 0 || j == (Jitter{}) {
		return d
	}
	return duration(j.scale(float64(d), u))
}

// Random spreads d by j, drawing from the process-wide source of
// math/rand/v2.
func (j Jitter) Random(d time.Duration) time.Duration {
	if d <= 0 || j == (Jitter{}) {
		return d
	}
	return j.Apply(d, rand.Float64())
}

func (j Jitter) scale(d, u float64) float64 {
	if j == (Jitter{}) {
		return d
	}
	return d * (1 - j.Below + u*(j.Below+j.Above))
}

// capped is min(grown(n), Max) as a float64 in nanoseconds; it may be
// +Inf when there is no Max.
func (p Policy) capped(n int) float64 {
	n = max(n, 1)
	var g float64
	if p.Power <= 0 {
		// Exact: Base·2^(n-1). Past 2¹⁰²⁴ every Base overflows to +Inf;
		// limiting the exponent keeps Ldexp's own arithmetic from wrapping.
		g = math.Ldexp(float64(p.Base), min(n-1, 2048))
	} else {
		g = float64(p.Base) * math.Pow(float64(n), float64(p.Power))
	}
	if p.Max > 0 && g >= float64(p.Max) {
		return float64(p.Max)
	}
	return g
}

// duration converts nanoseconds to a Duration, saturating: a float at or
// above 2⁶³ would not convert to int64 portably.
func duration(ns float64) time.Duration {
	switch {
	case ns >= math.MaxInt64: // float64(math.MaxInt64) is 2⁶³
		return math.MaxInt64
	case ns <= 0 || math.IsNaN(ns):
		return 0
	}
	return time.Duration(ns)
}

// Sleep waits d, or until ctx is done, whichever comes first: the one
// interruptible wait between retries, polls and pauses. It returns nil
// after waiting d, else ctx's error at once.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Every runs fn at once, and then again d after each run returns, until
// ctx is done: the one loop of a background pass that repeats on an
// interval (a re-seal, a gauge refresh). fn is given ctx; a run in
// progress is not cut short, and Every returns as soon as ctx is done
// after it.
func Every(ctx context.Context, d time.Duration, fn func(ctx context.Context)) {
	for {
		fn(ctx)
		if Sleep(ctx, d) != nil {
			return
		}
	}
}

// Ticks runs fn on every tick of a ticker of period d, the first d after
// the call, until ctx is done (it then returns nil) or fn returns an
// error (it returns that error): the one loop of a pass that keeps a
// fixed rate (a controller's reading, a scheduled run, a keep-alive).
// Unlike Every it does not run fn at once, and a run that outlasts d
// drops the ticks it missed instead of delaying the next. A run in
// progress is not cut short, and none starts once ctx is done.
func Ticks(ctx context.Context, d time.Duration, fn func(ctx context.Context) error) error {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if ctx.Err() != nil {
				return nil
			}
			if err := fn(ctx); err != nil {
				return err
			}
		}
	}
}
