package webhooks

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultRetrySchedule is when each attempt of a delivery is made,
// counted from the previous failure: at once, then 5 s, 5 min, 30 min,
// 2 h, 5 h, 10 h and 10 h later (Svix's schedule). Eight attempts over
// about 28 hours, then the delivery is dead.
var DefaultRetrySchedule = []time.Duration{
	0, 5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour,
}

// ParseRetrySchedule parses a comma-separated list of durations such as
// "0s,5s,5m" (BOXOFFICE_WEBHOOK_RETRY_SCHEDULE). Each entry is the delay
// before the attempt of that rank; the list's length is the number of
// attempts.
func ParseRetrySchedule(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("retry schedule: %q is not a non-negative duration", strings.TrimSpace(f))
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, errors.New("retry schedule is empty")
	}
	return out, nil
}

// DispatcherConfig configures a Dispatcher. NewDispatcher applies the
// defaults and validates the result.
type DispatcherConfig struct {
	// ID names this dispatcher in its leases. Defaults to the host name, the
	// process id and a random suffix.
	ID string
	// Guard vets every connection (SSRF). Defaults to a Guard that allows
	// public addresses only.
	Guard *Guard
	// Keys opens the endpoints' sealed secrets to sign with. Required.
	Keys *Keyring
	// RetrySchedule is the delay before each attempt; its length is the
	// number of attempts before a delivery is dead. Defaults to
	// DefaultRetrySchedule.
	RetrySchedule []time.Duration
	// Jitter spreads every retry delay uniformly over ±Jitter of itself,
	// so that deliveries that failed together do not retry together.
	// Defaults to 0.2.
	Jitter float64
	// Timeout bounds one attempt: connect, send, and the response's
	// headers and first KiB. Defaults to 15s.
	Timeout time.Duration
	// Lease is how long a claimed delivery stays with this dispatcher: a
	// dispatcher that dies leaves its deliveries due again after it.
	// Must exceed Timeout. Defaults to Timeout + 45s.
	Lease time.Duration
	// BatchSize caps the deliveries one claim takes. Defaults to 500.
	BatchSize int
	// PerOrganizer is the least share of one claim a tenant gets: each
	// claim gives every tenant seen in the previous claim an equal share
	// of BatchSize, PerOrganizer at least, so a tenant alone takes whole
	// batches and every tenant with due deliveries is visited in each
	// claim. Defaults to 100.
	PerOrganizer int
	// MaxInFlight caps the attempts this dispatcher makes at once.
	// Defaults to 512.
	MaxInFlight int
	// MaxInFlightPerOrganizer caps one organizer's attempts in flight here,
	// whatever its endpoints allow, reserving the rest for other tenants.
	// Defaults to MaxInFlight/4.
	MaxInFlightPerOrganizer int
	// PollInterval is the pause after a claim that found nothing to start.
	// Defaults to 100ms.
	PollInterval time.Duration
	// BusyDelay is how far a delivery is put back when its endpoint or
	// organizer is at its concurrency limit, without using an attempt.
	// Defaults to 250ms.
	BusyDelay time.Duration
	// CircuitThreshold is the run of consecutive retryable failures that
	// opens an endpoint's circuit. Defaults to 10.
	CircuitThreshold int
	// CircuitCooldown is how long an open circuit sends nothing before it
	// lets one probe through (half-open). Defaults to 30s.
	CircuitCooldown time.Duration
	// DisableAfter disables an endpoint that has failed every attempt for
	// this long. Defaults to 5 days.
	DisableAfter time.Duration
	// MaxPayloadBytes caps a message's size; a larger one is never sent and
	// its delivery is dead. Defaults to 256 KiB.
	MaxPayloadBytes int
	// Flushers is how many batches of outcomes are recorded at once, each
	// in its own transaction. Defaults to 4.
	Flushers int
	// FlushInterval bounds how long a finished attempt waits to be
	// recorded with others in one transaction. Defaults to 20ms.
	FlushInterval time.Duration
	// Retention is how long messages and attempts are kept, payloads
	// included. Defaults to 30 days.
	Retention time.Duration
	// PruneInterval is how often expired messages and attempts are
	// deleted. Defaults to 1h.
	PruneInterval time.Duration
	// Logger receives the dispatcher's logs. Required.
	Logger *slog.Logger
	// Registerer receives the dispatcher's metrics. Defaults to none.
	Registerer prometheus.Registerer
}

func (c DispatcherConfig) withDefaults() DispatcherConfig {
	if c.ID == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.ID = fmt.Sprintf("%s-%d-%s", cmp.Or(host, "dispatcher"), os.Getpid(), hex.EncodeToString(b))
	}
	if c.Guard == nil {
		c.Guard = &Guard{}
	}
	if len(c.RetrySchedule) == 0 {
		c.RetrySchedule = DefaultRetrySchedule
	}
	if c.Jitter == 0 {
		c.Jitter = 0.2
	}
	c.Timeout = cmp.Or(c.Timeout, 15*time.Second)
	c.Lease = cmp.Or(c.Lease, c.Timeout+45*time.Second)
	c.BatchSize = cmp.Or(c.BatchSize, 500)
	c.PerOrganizer = cmp.Or(c.PerOrganizer, 100)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, 512)
	c.MaxInFlightPerOrganizer = cmp.Or(c.MaxInFlightPerOrganizer, max(1, c.MaxInFlight/4))
	c.PollInterval = cmp.Or(c.PollInterval, 100*time.Millisecond)
	c.BusyDelay = cmp.Or(c.BusyDelay, 250*time.Millisecond)
	c.CircuitThreshold = cmp.Or(c.CircuitThreshold, 10)
	c.CircuitCooldown = cmp.Or(c.CircuitCooldown, 30*time.Second)
	c.DisableAfter = cmp.Or(c.DisableAfter, 5*24*time.Hour)
	c.MaxPayloadBytes = cmp.Or(c.MaxPayloadBytes, 256<<10)
	c.FlushInterval = cmp.Or(c.FlushInterval, 20*time.Millisecond)
	c.Flushers = cmp.Or(c.Flushers, 4)
	c.Retention = cmp.Or(c.Retention, 30*24*time.Hour)
	c.PruneInterval = cmp.Or(c.PruneInterval, time.Hour)
	return c
}

// Validate reports every invalid field of c, once defaults are applied.
func (c DispatcherConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Logger == nil {
		errs = append(errs, errors.New("Logger is required"))
	}
	if c.Keys == nil {
		errs = append(errs, errors.New("Keys is required"))
	}
	if c.Jitter < 0 || c.Jitter >= 1 {
		errs = append(errs, errors.New("Jitter must be in [0, 1)"))
	}
	if c.Timeout <= 0 || c.Lease <= c.Timeout {
		errs = append(errs, errors.New("Lease must exceed Timeout, and both be positive"))
	}
	for _, d := range c.RetrySchedule {
		if d < 0 {
			errs = append(errs, errors.New("RetrySchedule must not hold negative delays"))
			break
		}
	}
	if c.BatchSize < 1 || c.Flushers < 1 || c.PerOrganizer < 1 || c.MaxInFlight < 1 || c.MaxInFlightPerOrganizer < 1 {
		errs = append(errs, errors.New("BatchSize, PerOrganizer, MaxInFlight and MaxInFlightPerOrganizer must be positive"))
	}
	if c.CircuitThreshold < 1 || c.CircuitCooldown <= 0 || c.DisableAfter <= 0 {
		errs = append(errs, errors.New("CircuitThreshold, CircuitCooldown and DisableAfter must be positive"))
	}
	if c.Retention <= 0 || c.PruneInterval <= 0 || c.PollInterval <= 0 || c.BusyDelay <= 0 || c.FlushInterval <= 0 {
		errs = append(errs, errors.New("Retention, PruneInterval, PollInterval, BusyDelay and FlushInterval must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("webhook dispatcher config: %w", err)
	}
	return nil
}
