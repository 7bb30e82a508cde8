// This file owns the Dispatcher itself: its statuses and triggers, its
// type and constructor, Run, which starts and stops the loops the other
// files own (claim.go, attempt.go, flush.go, health.go, stats.go), and the
// jitter and sleep they share.

package webhooks

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"boxoffice/platform/backoff"
	"boxoffice/sqlcgen"
)

// Delivery statuses (webhook_deliveries.status).
const (
	StatusPending   = "pending"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusDead      = "dead"
	// StatusNeedsReview: the endpoint gave a terminal answer; the
	// delivery is not retried until it is recovered or replayed.
	StatusNeedsReview = "needs_review"
)

// Attempt triggers (webhook_attempts.trigger).
const (
	TriggerOriginal = "original"
	TriggerRetry    = "retry"
	TriggerReplay   = "replay"
	TriggerRecover  = "recover"
)

// Disabled reasons of an endpoint.
const (
	DisabledByUser    = "user"
	DisabledGone      = "gone"
	DisabledByFailing = "failing"
)

// PreviousSecretOverlap is how long a rotated-out secret keeps signing
// beside the new one.
const PreviousSecretOverlap = 24 * time.Hour

// Dispatcher sends due deliveries: it claims them from PostgreSQL fairly
// across tenants, POSTs each signed message, and records every attempt.
//
// # Guarantees
//
// Delivery is at least once, never exactly once. A claim leases its
// deliveries (their next_attempt_at moves Lease ahead) and an attempt's
// outcome is recorded after the receiver answered; a dispatcher that dies
// in between leaves the delivery due again when the lease runs out, and it
// is sent again with the same webhook-id: the receiver may see a
// duplicate, never a gap. Receivers dedupe on webhook-id.
//
// Every attempt made and recorded has its webhook_attempts row (number,
// trigger, status code, latency, error class, the first KiB of the
// answer), written in one transaction with its delivery's new state.
//
// # Fairness and throttling
//
// Each claim visits every tenant with due deliveries (in random order)
// and takes an equal share of each (PerOrganizer at least; a tenant none
// of whose deliveries could start in the previous claim gets only a few,
// so putting its backlog back costs the others nothing); at most MaxInFlightPerOrganizer
// of one tenant's attempts, and an endpoint's max_concurrency of its own,
// run at once. A delivery that would exceed a concurrency or rate limit,
// or whose endpoint's circuit is open, is put back without an attempt:
// throttling never uses up retries. One tenant's hanging endpoint thus
// holds at most its concurrency of the dispatcher, never the queue.
// Concurrency and rate limits are kept by each dispatcher process: with N
// processes an endpoint may see up to N times its limits.
//
// # Circuit breaker and disabling
//
// CircuitThreshold consecutive retryable failures open an endpoint's
// circuit: nothing is sent to it for CircuitCooldown, then one probe at a
// time (half-open); a success closes it, a failure reopens it (the
// breaker type states these rules). An endpoint
// that has failed every attempt for DisableAfter, or answered 410, is
// disabled: its pending deliveries become failed and stay for recover and
// replay.
type Dispatcher struct {
	pool    *pgxpool.Pool
	cfg     DispatcherConfig
	logger  *slog.Logger
	metrics *metrics
	client  *http.Client
	q       *sqlcgen.Queries

	mu        sync.Mutex
	endpoints map[uuid.UUID]*endpointState
	orgs      map[uuid.UUID]int
	inflight  int
	// gone holds the endpoints that answered 410 lately, so nothing more is
	// sent to them while their disabling is being recorded.
	gone map[uuid.UUID]time.Time
	// slot is signaled when an attempt ends, waking a claim loop that
	// waits for capacity.
	slot    chan struct{}
	results chan result

	// afterSendFunc, set only by tests, sees each attempt's outcome before
	// it is recorded; returning true drops it, as a dispatcher that died
	// right after the receiver answered would.
	afterSendFunc func(r *result) (drop bool)
}

// NewDispatcher returns a dispatcher for cfg. Returns an error naming
// every invalid field of cfg.
func NewDispatcher(pool *pgxpool.Pool, cfg DispatcherConfig) (*Dispatcher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		return nil, errors.New("webhook dispatcher: pool is required")
	}
	return &Dispatcher{
		pool:      pool,
		cfg:       cfg,
		logger:    cfg.Logger.With("component", "webhooks_dispatch", "dispatcher", cfg.ID),
		metrics:   newMetrics(cfg.Registerer),
		client:    newClient(cfg),
		q:         sqlcgen.New(),
		endpoints: map[uuid.UUID]*endpointState{},
		orgs:      map[uuid.UUID]int{},
		gone:      map[uuid.UUID]time.Time{},
		slot:      make(chan struct{}, 1),
		results:   make(chan result, cfg.MaxInFlight),
	}, nil
}

// Run dispatches until ctx is done, then stops claiming, lets the attempts
// in flight finish (Timeout at most), records them and returns nil. It
// also refreshes the gauges and prunes expired messages and attempts.
func (d *Dispatcher) Run(ctx context.Context) error {
	var flushers sync.WaitGroup
	for range d.cfg.Flushers {
		flushers.Go(func() { d.flushLoop(ctx) })
	}
	var bg sync.WaitGroup
	bgCtx, cancel := context.WithCancel(ctx)
	bg.Go(func() { backoff.Every(bgCtx, statsInterval, d.refreshStats) })
	bg.Go(func() { d.pruneLoop(bgCtx) })

	var sends sync.WaitGroup
	d.claimLoop(ctx, &sends)
	sends.Wait()
	close(d.results)
	flushers.Wait()
	cancel()
	bg.Wait()
	return nil
}

// jitter spreads v uniformly over ±Jitter of itself.
func (d *Dispatcher) jitter(v time.Duration) time.Duration {
	return backoff.Even(d.cfg.Jitter).Random(v)
}

// sleep waits for d or until ctx is done; it reports whether ctx is still
// live.
func sleep(ctx context.Context, d time.Duration) bool { return backoff.Sleep(ctx, d) == nil }
