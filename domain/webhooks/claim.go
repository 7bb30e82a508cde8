// This file owns claiming and fairness: the claim loop, each claim's
// equal share per tenant, and admit, which decides whether a claimed
// delivery may start now (concurrency, rate limits, a recent 410, and the
// endpoint's circuit, asked of its breaker) or is put back without using
// an attempt.

package webhooks

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"golang.org/x/time/rate"

	"boxoffice/sqlcgen"
)

// goneMemory is how long an endpoint that answered 410 is remembered as
// gone by the dispatcher that saw it, which is longer than recording its
// disabling takes.
const goneMemory = time.Minute

// errorPause is the pause after a claim that failed.
const errorPause = time.Second

// endpointState is what this dispatcher knows of an endpoint between
// claims: its attempts in flight, its rate limiter, and its circuit
// breaker (whether a half-open probe is out).
type endpointState struct {
	inflight int
	limiter  *rate.Limiter
	limit    int32
	circuit  breaker
}

func (d *Dispatcher) claimLoop(ctx context.Context, sends *sync.WaitGroup) {
	sendCtx := context.WithoutCancel(ctx)
	tenants := 1 // tenants in the last claim
	var squeezed []uuid.UUID
	for ctx.Err() == nil {
		d.mu.Lock()
		free := d.cfg.MaxInFlight - d.inflight
		busy := d.inflight > 0
		d.mu.Unlock()
		// While attempts are in flight, claim only once half a batch is
		// free: a claim costs about the same for 20 rows as for 250.
		if free <= 0 || (busy && free < min(d.cfg.BatchSize, d.cfg.MaxInFlight)/2) {
			select {
			case <-ctx.Done():
			case <-d.slot:
			}
			continue
		}
		n := min(d.cfg.BatchSize, free)
		// Each tenant gets an equal share of the claim, PerOrganizer at
		// least: a tenant alone takes the whole batch, and every tenant
		// with due deliveries is visited in every claim.
		perTenant := max(d.cfg.PerOrganizer, n/tenants)
		started, claimed, k, sq, err := d.claimOnce(ctx, sendCtx, sends, n, perTenant, squeezed)
		squeezed = sq
		switch {
		case err != nil && ctx.Err() == nil:
			d.logger.ErrorContext(ctx, "claim webhook deliveries", "error", err.Error())
			sleep(ctx, errorPause)
		case claimed == 0 || started == 0:
			sleep(ctx, d.cfg.PollInterval)
		}
		tenants = max(k, 1)
	}
}

// squeezedShare is what a tenant gets of a claim while none of its
// deliveries could start in the previous one (its endpoints are at their
// limits or their circuits open): enough to notice when they free up,
// little enough that putting them back costs nothing to the others.
const squeezedShare = 10

// claimOnce claims up to n due deliveries, at most perTenant of each
// tenant (squeezedShare of the tenants in squeezed), starts those it may
// and puts the others back. Returns how many it started and claimed, how
// many tenants they belong to, and the tenants none of whose deliveries
// could start.
func (d *Dispatcher) claimOnce(_, sendCtx context.Context, sends *sync.WaitGroup, n, perTenant int, squeezed []uuid.UUID) (int, int, int, []uuid.UUID, error) {
	limits := make([]int32, len(squeezed))
	for i := range limits {
		limits[i] = squeezedShare
	}
	// The claim is not cut short by Run's ctx: a claim that committed while Run
	// was stopping must come back, or its rows would stay leased unsent.
	// What it claimed is attempted (sendCtx) or put back below.
	claimCtx, cancelClaim := context.WithTimeout(sendCtx, 10*time.Second)
	defer cancelClaim()
	rows, err := d.q.WebhookDeliveryClaim(claimCtx, d.pool, sqlcgen.WebhookDeliveryClaimParams{
		DispatcherID: d.cfg.ID, Lease: d.cfg.Lease, PerOrganizer: int32(perTenant), MaxRows: int32(n),
		Squeezed: squeezed, SqueezedLimits: limits,
	})
	if err != nil {
		return 0, 0, 0, nil, fmt.Errorf("claim: %w", err)
	}
	// tenants maps each tenant in the claim to whether any of its
	// deliveries started.
	tenants := map[uuid.UUID]bool{}
	for _, row := range rows {
		tenants[row.OrganizerID] = false
	}
	var (
		releaseIDs    []uuid.UUID
		releaseDelays []int64
		disabled      []uuid.UUID
		started       int
	)
	for _, row := range rows {
		if !row.Enabled {
			if !slices.Contains(disabled, row.EndpointID) {
				disabled = append(disabled, row.EndpointID)
			}
			continue
		}
		probe, delay, reason := d.admit(row)
		if reason != "" {
			d.metrics.throttled.WithLabelValues(reason).Inc()
			releaseIDs = append(releaseIDs, row.ID)
			releaseDelays = append(releaseDelays, delay.Milliseconds())
			continue
		}
		started++
		tenants[row.OrganizerID] = true
		sends.Go(func() { d.send(sendCtx, row, probe) })
	}
	var stuck []uuid.UUID
	for org, ok := range tenants {
		if !ok {
			stuck = append(stuck, org)
		}
	}
	// Putting rows back must happen even when Run is stopping (ctx done):
	// a graceful stop leaves nothing leased.
	ctx, cancel := context.WithTimeout(sendCtx, 5*time.Second)
	defer cancel()
	if len(releaseIDs) > 0 {
		if err := d.q.WebhookDeliveryRelease(ctx, d.pool, sqlcgen.WebhookDeliveryReleaseParams{
			DispatcherID: d.cfg.ID, Ids: releaseIDs, DelaysMs: releaseDelays,
		}); err != nil {
			// The leases run out on their own; the deliveries are late, not lost.
			d.logger.ErrorContext(ctx, "put back throttled webhook deliveries", "error", err.Error(), "deliveries", len(releaseIDs))
		}
	}
	for _, id := range disabled {
		if _, err := d.q.WebhookDeliveryFailPendingByEndpoint(ctx, d.pool, id); err != nil {
			d.logger.ErrorContext(ctx, "stop deliveries of disabled endpoint", "error", err.Error(), "endpoint_id", id.String())
		}
	}
	return started, len(rows), len(tenants), stuck, nil
}

// admit decides whether row may be attempted now. When it may, it counts
// the attempt in flight and reports whether it is a half-open probe;
// when it may not, it returns how long to put it back for and why.
func (d *Dispatcher) admit(row sqlcgen.WebhookDeliveryClaimRow) (probe bool, delay time.Duration, reason string) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	es := d.endpoints[row.EndpointID]
	if es == nil {
		es = &endpointState{circuit: newBreaker(d.cfg)}
	}
	es.circuit.load(row.CircuitState, row.CircuitOpenUntil, 0)
	probe, wait, circuit := es.circuit.allow(now, es.inflight)
	if circuit == reasonCircuitOpen {
		return false, wait + d.jitter(d.cfg.BusyDelay), circuit
	}
	if at, ok := d.gone[row.EndpointID]; ok {
		if now.Sub(at) < goneMemory {
			return false, d.jitter(d.cfg.BusyDelay), "endpoint_gone"
		}
		delete(d.gone, row.EndpointID)
	}
	d.endpoints[row.EndpointID] = es
	switch {
	case circuit != "":
		return false, d.jitter(d.cfg.BusyDelay), circuit
	case es.inflight >= int(row.MaxConcurrency):
		return false, d.jitter(d.cfg.BusyDelay), "endpoint_concurrency"
	case d.orgs[row.OrganizerID] >= d.cfg.MaxInFlightPerOrganizer:
		return false, d.jitter(d.cfg.BusyDelay), "organizer_concurrency"
	}
	if row.RateLimitPerSecond != nil {
		if es.limiter == nil || es.limit != *row.RateLimitPerSecond {
			es.limit = *row.RateLimitPerSecond
			es.limiter = rate.NewLimiter(rate.Limit(es.limit), int(es.limit))
		}
		r := es.limiter.ReserveN(now, 1)
		if wait := r.DelayFrom(now); wait > 0 {
			r.CancelAt(now)
			return false, wait, "rate_limit"
		}
	} else {
		es.limiter = nil
	}
	es.inflight++
	es.circuit.begin(probe)
	d.orgs[row.OrganizerID]++
	d.inflight++
	return probe, 0, ""
}

// done undoes admit's counting of the endpoint and the tenant once an
// attempt has ended.
func (d *Dispatcher) done(row sqlcgen.WebhookDeliveryClaimRow, probe bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if es := d.endpoints[row.EndpointID]; es != nil {
		es.inflight--
		es.circuit.end(probe)
		if es.inflight == 0 && es.limiter == nil && es.circuit.idle() {
			delete(d.endpoints, row.EndpointID)
		}
	}
	if d.orgs[row.OrganizerID]--; d.orgs[row.OrganizerID] <= 0 {
		delete(d.orgs, row.OrganizerID)
	}
}

// freeSlot gives back the dispatcher-wide capacity an attempt held, once
// its outcome is with the flushers: recording that falls behind slows
// claiming instead of piling up leased deliveries.
func (d *Dispatcher) freeSlot() {
	d.mu.Lock()
	d.inflight--
	d.mu.Unlock()
	select {
	case d.slot <- struct{}{}:
	default:
	}
}
