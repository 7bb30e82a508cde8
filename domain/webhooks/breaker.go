// This file owns the circuit breaker: the rules by which an endpoint's
// circuit opens, lets a probe through and closes again, as the breaker
// type, and the circuit states they are stated in.

package webhooks

import (
	"time"
)

// Circuit states of an endpoint, as Endpoint.CircuitState and the
// endpoints gauge name them: webhook_endpoints.circuit_state holds the
// first two; half-open is an open circuit whose cooldown has ended.
const (
	circuitClosed   = "closed"
	circuitOpen     = "open"
	circuitHalfOpen = "half_open"
)

// Reasons a breaker gives for holding an attempt back (the throttled
// metric's reason label).
const (
	reasonCircuitOpen     = "circuit_open"
	reasonCircuitHalfOpen = "circuit_half_open"
)

// breaker is one endpoint's circuit breaker. Closed, it lets every
// attempt through. threshold consecutive failures open it: open, it lets
// nothing through until cooldown has passed since it opened. Then it is
// half-open: it lets one probe through at a time, and only while no other
// attempt to the endpoint is in flight; the probe's success closes it
// (and forgets the failures), its failure opens it again for another
// cooldown. Any success closes it; any failure that leaves the run at
// threshold or more (re)opens it.
//
// The dispatcher keeps the circuit of every endpoint in the endpoint's
// row, shared by every dispatcher process: a claim loads it (load), and
// the batch that records attempts applies record to it in the row
// (recordHealth), adding failures to the stored run so that dispatchers
// recording at once add up. Whether a probe is out is known only to the
// dispatcher that sent it (probing): with N processes an endpoint may see
// up to N probes at once.
//
// A breaker is not safe for concurrent use; the dispatcher holds its
// lock around it.
type breaker struct {
	threshold int
	cooldown  time.Duration

	open bool
	// openUntil is when an open circuit turns half-open; zero means at
	// once.
	openUntil time.Time
	// failures is the run of consecutive failures.
	failures int
	// probing says a half-open probe this dispatcher sent is in flight.
	probing bool
}

// newBreaker returns a closed breaker with cfg's threshold and cooldown.
func newBreaker(cfg DispatcherConfig) breaker {
	return breaker{threshold: cfg.CircuitThreshold, cooldown: cfg.CircuitCooldown}
}

// load takes the circuit as an endpoint's row holds it (circuit_state,
// circuit_open_until) and its run of failures, keeping whether a probe is
// out.
func (b *breaker) load(state string, openUntil *time.Time, failures int) {
	b.open = state == circuitOpen
	b.openUntil = time.Time{}
	if openUntil != nil {
		b.openUntil = *openUntil
	}
	b.failures = failures
}

// state is the circuit's state at now: circuitClosed, circuitOpen or
// circuitHalfOpen.
func (b *breaker) state(now time.Time) string {
	switch {
	case !b.open:
		return circuitClosed
	case now.Before(b.openUntil):
		return circuitOpen
	}
	return circuitHalfOpen
}

// allow says whether an attempt may start at now while inflight other
// attempts to the endpoint are in flight. It changes nothing: an attempt
// that goes ahead calls begin. reason is "" when it may, with probe true
// when the attempt is the half-open probe; else reasonCircuitOpen with
// wait until the circuit turns half-open, or reasonCircuitHalfOpen (wait
// 0) when a probe or another attempt is already out.
func (b *breaker) allow(now time.Time, inflight int) (probe bool, wait time.Duration, reason string) {
	switch b.state(now) {
	case circuitOpen:
		return false, b.openUntil.Sub(now), reasonCircuitOpen
	case circuitHalfOpen:
		if b.probing || inflight > 0 {
			return false, 0, reasonCircuitHalfOpen
		}
		return true, 0, ""
	}
	return false, 0, ""
}

// begin marks an attempt allow let through as started; a probe holds the
// half-open circuit until end.
func (b *breaker) begin(probe bool) {
	b.probing = b.probing || probe
}

// end marks a started attempt as ended (its outcome is recorded later,
// by record).
func (b *breaker) end(probe bool) {
	if probe {
		b.probing = false
	}
}

// idle says the breaker holds nothing the dispatcher must remember: no
// probe is out (the rest is loaded again from the row at each claim).
func (b *breaker) idle() bool { return !b.probing }

// record applies one attempt's outcome at now: a success closes the
// circuit and forgets the failures; a failure adds to the run and, once
// the run reaches threshold, opens the circuit (again) until now +
// cooldown. Reports whether it opened the circuit.
func (b *breaker) record(now time.Time, success bool) (opened bool) {
	if success {
		b.open, b.openUntil, b.failures = false, time.Time{}, 0
		return false
	}
	b.failures++
	if b.failures < b.threshold {
		return false
	}
	b.open, b.openUntil = true, now.Add(b.cooldown)
	return true
}
