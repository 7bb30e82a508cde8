package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/time/rate"

	"boxoffice/platform/backoff"
	"boxoffice/platform/db"
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

// Circuit states of an endpoint.
const (
	circuitOpen = "open"
)

// Disabled reasons of an endpoint.
const (
	DisabledByUser    = "user"
	DisabledGone      = "gone"
	DisabledByFailing = "failing"
)

// goneMemory is how long an endpoint that answered 410 is remembered as
// gone by the dispatcher that saw it, which is longer than recording its
// disabling takes.
const goneMemory = time.Minute

// maxStoredResponse is how much of an answer an attempt keeps.
const maxStoredResponse = 1024

// maxDrain is how much more of an answer is read so that the connection
// can be reused; a longer answer closes it.
const maxDrain = 64 << 10

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
// time (half-open); a success closes it, a failure reopens it. An endpoint
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

// endpointState is what this dispatcher knows of an endpoint between
// claims: its attempts in flight, its rate limiter, and whether a
// half-open probe is out.
type endpointState struct {
	inflight int
	limiter  *rate.Limiter
	limit    int32
	probing  bool
}

// result is the outcome of one attempt, as recorded. It stays inside the
// package: it carries the delivery row as claimed, endpoint secret included.
type result struct {
	Delivery   sqlcgen.WebhookDeliveryClaimRow
	Number     int32
	Trigger    string
	StatusCode int
	Class      string
	verdict    verdict
	Latency    time.Duration
	Response   string
	retryAfter time.Duration
	At         time.Time
	probe      bool
	// sent says a request went out (whatever came back): false when the
	// attempt failed before sending, as one whose secret cannot sign.
	sent bool
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

// newClient is the HTTP client of every attempt: connections through the
// guard (no proxy from the environment, which would bypass it), keep-alive
// with enough idle connections for MaxInFlight, no redirects followed, no
// cookies, and the attempt timeout.
func newClient(cfg DispatcherConfig) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           cfg.Guard.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          cfg.MaxInFlight * 2,
		MaxIdleConnsPerHost:   cfg.MaxInFlight,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: cfg.Timeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       cfg.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Timings of the dispatcher's own housekeeping.
const (
	statsInterval = 5 * time.Second
	errorPause    = time.Second
	flushTimeout  = 30 * time.Second
	flushAttempts = 3
)

// flushRetries is the wait after a failed recording: 100ms a try.
var flushRetries = backoff.Policy{Base: 100 * time.Millisecond, Power: 1}

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
	bg.Go(func() { d.statsLoop(bgCtx) })
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
	halfOpen := false
	if row.CircuitState == circuitOpen {
		if row.CircuitOpenUntil != nil && now.Before(*row.CircuitOpenUntil) {
			return false, row.CircuitOpenUntil.Sub(now) + d.jitter(d.cfg.BusyDelay), "circuit_open"
		}
		halfOpen = true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if at, ok := d.gone[row.EndpointID]; ok {
		if now.Sub(at) < goneMemory {
			return false, d.jitter(d.cfg.BusyDelay), "endpoint_gone"
		}
		delete(d.gone, row.EndpointID)
	}
	es := d.endpoints[row.EndpointID]
	if es == nil {
		es = &endpointState{}
		d.endpoints[row.EndpointID] = es
	}
	switch {
	case halfOpen && (es.probing || es.inflight > 0):
		return false, d.jitter(d.cfg.BusyDelay), "circuit_half_open"
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
	es.probing = es.probing || halfOpen
	d.orgs[row.OrganizerID]++
	d.inflight++
	return halfOpen, 0, ""
}

// done undoes admit's counting of the endpoint and the tenant once an
// attempt has ended.
func (d *Dispatcher) done(row sqlcgen.WebhookDeliveryClaimRow, probe bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if es := d.endpoints[row.EndpointID]; es != nil {
		es.inflight--
		if probe {
			es.probing = false
		}
		if es.inflight == 0 && es.limiter == nil && !es.probing {
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

// send makes one attempt and hands its outcome to the flusher.
func (d *Dispatcher) send(ctx context.Context, row sqlcgen.WebhookDeliveryClaimRow, probe bool) {
	r := d.attempt(ctx, row)
	r.probe = probe
	if r.verdict == verdictGone {
		d.mu.Lock()
		d.gone[row.EndpointID] = time.Now()
		d.mu.Unlock()
	}
	d.done(row, probe)
	defer d.freeSlot()
	if d.afterSendFunc != nil && d.afterSendFunc(&r) {
		return
	}
	d.results <- r
}

// attempt POSTs the message to the endpoint, signed with every live key.
func (d *Dispatcher) attempt(ctx context.Context, row sqlcgen.WebhookDeliveryClaimRow) result {
	r := result{Delivery: row, Number: row.Attempts + 1, Trigger: row.NextTrigger, At: time.Now()}
	if len(row.Payload) > d.cfg.MaxPayloadBytes {
		r.Class, r.verdict = ClassPayloadTooLarge, verdictTerminal
		return r
	}
	body, err := EncodeFor(int(row.PayloadVersion), row.Payload)
	if err != nil { // not a message this package stored (it stores JSON): never sent, no retry helps
		r.Class, r.verdict = ClassPayloadTooLarge, verdictTerminal
		r.Response = "the stored message does not decode"
		return r
	}
	id := MessageID(row.MessageID)
	ts := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, row.Url, bytes.NewReader(body))
	if err != nil {
		r.Class, r.verdict = ClassRefused, verdictTerminal
		r.Response = "invalid url"
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Boxoffice-Webhooks/1")
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	keys, err := d.signingKeys(ctx, row, ts)
	if err != nil {
		// Never sent unsigned, nor signed with the previous secret alone:
		// the attempt fails, counted by its class and in the signature
		// failures by reason, and the delivery goes on on its schedule (a
		// rotation, or restoring the key, can fix the secret).
		d.metrics.signatureFailures.WithLabelValues(secretReason(err)).Inc()
		r.Class, r.verdict = ClassSecretInvalid, verdictRetry
		r.Response = "the endpoint's signing secret cannot be used"
		return r
	}
	req.Header.Set(HeaderSignature, Sign(keys, id, ts, body))

	start := time.Now()
	r.sent = true
	resp, err := d.client.Do(req)
	if err != nil {
		r.Latency = time.Since(start)
		r.Class, r.verdict = classify(0, err)
		r.Response = truncate(transportError(err))
		return r
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxStoredResponse))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	_ = resp.Body.Close()
	r.Latency = time.Since(start)
	r.StatusCode = resp.StatusCode
	r.Response = truncate(string(answer))
	r.Class, r.verdict = classify(resp.StatusCode, nil)
	r.retryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	return r
}

// signingKeys are the keys a message is signed with at ts: the current
// secret, and the previous one while its overlap lasts, both opened with
// the keyring. Returns a *SecretError when the current secret cannot be
// used; a previous secret that cannot is left out (the delivery is still
// signed, with the current one) and counted as previous_<reason>.
func (d *Dispatcher) signingKeys(ctx context.Context, row sqlcgen.WebhookDeliveryClaimRow, ts time.Time) ([]Key, error) {
	cur, err := d.cfg.Keys.openKey(row.EndpointID, row.Secret)
	if err != nil {
		return nil, err
	}
	keys := []Key{cur}
	if row.PreviousSecret != nil && row.PreviousSecretExpiresAt != nil && ts.Before(*row.PreviousSecretExpiresAt) {
		prev, err := d.cfg.Keys.openKey(row.EndpointID, *row.PreviousSecret)
		if err != nil {
			d.metrics.signatureFailures.WithLabelValues("previous_" + secretReason(err)).Inc()
			d.logger.DebugContext(ctx, "previous webhook secret cannot be used; signing with the current one only",
				"endpoint_id", row.EndpointID.String(), "reason", secretReason(err))
			return keys, nil
		}
		keys = append(keys, prev)
	}
	return keys, nil
}

// transportError describes a failed request without its URL, which may
// hold the organizer's credentials in its query.
func transportError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// truncate keeps at most maxStoredResponse bytes of valid UTF-8 without
// NUL, which PostgreSQL text cannot hold.
func truncate(s string) string {
	if len(s) > maxStoredResponse {
		s = s[:maxStoredResponse]
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	for len(s) > maxStoredResponse {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return strings.ReplaceAll(s, "\x00", "")
}

// jitter spreads v uniformly over ±Jitter of itself.
func (d *Dispatcher) jitter(v time.Duration) time.Duration {
	return backoff.Even(d.cfg.Jitter).Random(v)
}

// flushLoop records finished attempts in batches: BatchSize of them, or
// whatever FlushInterval collected. Config.Flushers of them share the
// results, so recording runs on several connections at once.
func (d *Dispatcher) flushLoop(ctx context.Context) {
	t := time.NewTicker(d.cfg.FlushInterval)
	defer t.Stop()
	var batch []result
	for {
		select {
		case r, ok := <-d.results:
			if !ok {
				d.flush(ctx, batch)
				return
			}
			batch = append(batch, r)
			if len(batch) >= d.cfg.BatchSize {
				d.flush(ctx, batch)
				batch = nil
			}
		case <-t.C:
			if len(batch) > 0 {
				d.flush(ctx, batch)
				batch = nil
			}
		}
	}
}

// deadExhausted is the dead-letter reason of a delivery whose retries ran
// out: the one that makes a delivery.exhausted notice.
const deadExhausted = "exhausted"

// outcome is what a batch does to one delivery.
type outcome struct {
	status string
	delay  time.Duration
	reason string // dead-letter reason, when status is dead
}

// decide turns an attempt into its delivery's next state.
func (d *Dispatcher) decide(r result) outcome {
	switch r.verdict {
	case verdictSuccess:
		return outcome{status: StatusSucceeded}
	case verdictGone:
		return outcome{status: StatusDead, reason: "gone"}
	case verdictReview:
		return outcome{status: StatusNeedsReview}
	case verdictTerminal:
		reason := "terminal"
		switch r.Class {
		case ClassRefused:
			reason = "refused"
		case ClassPayloadTooLarge:
			reason = "payload_too_large"
		}
		return outcome{status: StatusDead, reason: reason}
	}
	made := int(r.Number - r.Delivery.RetryBase)
	if made >= len(d.cfg.RetrySchedule) {
		return outcome{status: StatusDead, reason: deadExhausted}
	}
	delay := max(d.jitter(d.cfg.RetrySchedule[made]), r.retryAfter)
	return outcome{status: StatusPending, delay: delay}
}

// endpointTally is what a batch says about one endpoint's health.
type endpointTally struct {
	succeeded bool
	// trailing counts the retryable failures after the batch's last
	// success.
	trailing int
	gone     bool
}

// flush records a batch of attempts and their deliveries' new states in
// one transaction, then updates the endpoints' health. A batch that cannot
// be recorded is logged and dropped: its deliveries' leases run out and
// they are sent again (at least once).
//
// The transaction commits without waiting for its WAL flush
// (synchronous_commit off): a database crash can lose the last fraction
// of a second of recorded outcomes, which costs exactly what a dispatcher
// crash before recording costs — the deliveries are sent again with the
// same webhook-id — and makes recording several times cheaper.
func (d *Dispatcher) flush(ctx context.Context, batch []result) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	slices.SortFunc(batch, func(a, b result) int { return bytes.Compare(a.Delivery.ID[:], b.Delivery.ID[:]) })
	attempts := make([]sqlcgen.WebhookAttemptInsertParams, len(batch))
	succeeded := sqlcgen.WebhookDeliverySucceedParams{DispatcherID: d.cfg.ID}
	complete := sqlcgen.WebhookDeliveryCompleteParams{DispatcherID: d.cfg.ID}
	outcomes := make([]outcome, len(batch))
	tallies := map[uuid.UUID]*endpointTally{}
	var order []uuid.UUID
	// Health follows the order the attempts ended in, not the id order.
	byTime := slices.Clone(batch)
	slices.SortStableFunc(byTime, func(a, b result) int { return a.At.Add(a.Latency).Compare(b.At.Add(b.Latency)) })
	for _, r := range byTime {
		t := tallies[r.Delivery.EndpointID]
		if t == nil {
			t = &endpointTally{}
			tallies[r.Delivery.EndpointID] = t
			order = append(order, r.Delivery.EndpointID)
		}
		switch r.verdict {
		case verdictSuccess:
			t.succeeded, t.trailing = true, 0
		case verdictRetry:
			t.trailing++
		case verdictGone:
			t.gone = true
		}
	}
	for i, r := range batch {
		o := d.decide(r)
		outcomes[i] = o
		var status *int32
		if r.StatusCode > 0 {
			s := int32(r.StatusCode)
			status = &s
		}
		attempts[i] = sqlcgen.WebhookAttemptInsertParams{
			DeliveryID: r.Delivery.ID, MessageID: r.Delivery.MessageID, EndpointID: r.Delivery.EndpointID,
			OrganizerID: r.Delivery.OrganizerID, Number: r.Number, Trigger: r.Trigger, StatusCode: status,
			LatencyMs: int32(r.Latency.Milliseconds()), ErrorClass: r.Class, ResponseBody: r.Response, CreatedAt: r.At,
		}
		if o.status == StatusSucceeded {
			succeeded.Ids = append(succeeded.Ids, r.Delivery.ID)
			continue
		}
		complete.Ids = append(complete.Ids, r.Delivery.ID)
		complete.Statuses = append(complete.Statuses, o.status)
		complete.DelaysMs = append(complete.DelaysMs, o.delay.Milliseconds())
		complete.LastErrors = append(complete.LastErrors, lastError(r))
	}
	var disabled map[uuid.UUID]string
	var err error
	for try := 1; try <= flushAttempts; try++ {
		disabled, err = db.WithTxV(ctx, d.pool, func(ctx context.Context, tx pgx.Tx) (map[uuid.UUID]string, error) {
			if err := d.q.WebhookFlushAsyncCommit(ctx, tx); err != nil {
				return nil, fmt.Errorf("relax commit: %w", err)
			}
			if _, err := d.q.WebhookAttemptInsert(ctx, tx, attempts); err != nil {
				return nil, fmt.Errorf("insert attempts: %w", err)
			}
			if len(succeeded.Ids) > 0 {
				if err := d.q.WebhookDeliverySucceed(ctx, tx, succeeded); err != nil {
					return nil, fmt.Errorf("complete succeeded deliveries: %w", err)
				}
			}
			if len(complete.Ids) > 0 {
				if err := d.q.WebhookDeliveryComplete(ctx, tx, complete); err != nil {
					return nil, fmt.Errorf("complete failed deliveries: %w", err)
				}
			}
			for i, r := range batch {
				switch {
				case outcomes[i].reason == deadExhausted:
					if err := d.noticeExhausted(ctx, tx, r); err != nil {
						return nil, err
					}
				case outcomes[i].status == StatusNeedsReview:
					if err := d.noticeNeedsReview(ctx, tx, r); err != nil {
						return nil, err
					}
				}
			}
			return d.recordHealth(ctx, tx, order, tallies)
		})
		if err == nil || ctx.Err() != nil {
			break
		}
		sleep(ctx, flushRetries.Delay(try))
	}
	if err != nil {
		d.logger.ErrorContext(ctx, "record webhook attempts; their deliveries will be sent again", "error", err.Error(), "attempts", len(batch))
		return
	}
	for i, r := range batch {
		d.observe(ctx, r, outcomes[i])
	}
	for id, reason := range disabled {
		d.logger.WarnContext(ctx, "webhook endpoint disabled", "endpoint_id", id.String(), "reason", reason)
	}
}

// recordHealth applies a batch's tallies to its endpoints: successes
// close circuits, runs of failures may open them, a 410 or days of
// failure disable the endpoint and stop its pending deliveries. Returns
// the endpoints it disabled, with the reason.
func (d *Dispatcher) recordHealth(ctx context.Context, tx pgx.Tx, order []uuid.UUID, tallies map[uuid.UUID]*endpointTally) (map[uuid.UUID]string, error) {
	var healthy []uuid.UUID
	for _, id := range order {
		if tallies[id].succeeded {
			healthy = append(healthy, id)
		}
	}
	if len(healthy) > 0 {
		if err := d.q.WebhookEndpointRecordSuccess(ctx, tx, healthy); err != nil {
			return nil, fmt.Errorf("record endpoint success: %w", err)
		}
	}
	disabled := map[uuid.UUID]string{}
	for _, id := range order {
		t := tallies[id]
		if t.trailing > 0 {
			st, err := d.q.WebhookEndpointRecordFailures(ctx, tx, sqlcgen.WebhookEndpointRecordFailuresParams{
				ID: id, Failures: int32(t.trailing), Threshold: int32(d.cfg.CircuitThreshold), OpenFor: d.cfg.CircuitCooldown,
			})
			switch {
			case errors.Is(err, db.ErrNotFound):
				continue // deleted meanwhile
			case err != nil:
				return nil, fmt.Errorf("record endpoint failures: %w", err)
			}
			if st.Enabled && time.Since(st.FailingSince) >= d.cfg.DisableAfter {
				disabled[id] = DisabledByFailing
			}
		}
		if t.gone {
			disabled[id] = DisabledGone
		}
	}
	for id, reason := range disabled {
		row, err := d.q.WebhookEndpointDisable(ctx, tx, sqlcgen.WebhookEndpointDisableParams{ID: id, Reason: reason})
		switch {
		case errors.Is(err, db.ErrNotFound):
			delete(disabled, id) // disabled (or deleted) meanwhile: not this batch's transition
			continue
		case err != nil:
			return nil, fmt.Errorf("disable endpoint: %w", err)
		}
		if _, err := d.q.WebhookDeliveryFailPendingByEndpoint(ctx, tx, id); err != nil {
			return nil, fmt.Errorf("stop deliveries of disabled endpoint: %w", err)
		}
		if err := d.noticeDisabled(ctx, tx, id, reason, row); err != nil {
			return nil, err
		}
	}
	return disabled, nil
}

func lastError(r result) string {
	if r.StatusCode > 0 {
		return r.Class + " (status " + strconv.Itoa(r.StatusCode) + ")"
	}
	return r.Class
}

// observe updates the metrics and logs an attempt once it is recorded.
// Logs name the message, endpoint, organizer and order, never the URL or
// a secret.
func (d *Dispatcher) observe(ctx context.Context, r result, o outcome) {
	m := d.metrics
	m.attempts.WithLabelValues(r.Class, r.Trigger).Inc()
	m.attemptSeconds.Observe(r.Latency.Seconds())
	if r.sent && r.Delivery.AcknowledgedAt != nil {
		// The endpoint had acknowledged this webhook-id before (a recorded
		// 2xx): a replay or a recover. A send again after a 2xx whose
		// recording was lost leaves no trace to tell it by.
		m.duplicates.Inc()
	}
	attrs := []any{
		"msg_id", MessageID(r.Delivery.MessageID), "delivery_id", r.Delivery.ID.String(),
		"endpoint_id", r.Delivery.EndpointID.String(), "organizer_id", r.Delivery.OrganizerID.String(),
		"attempt", r.Number, "trigger", r.Trigger, "error_class", r.Class, "status_code", r.StatusCode,
		"latency_ms", r.Latency.Milliseconds(),
	}
	if r.Delivery.OrderID != nil {
		attrs = append(attrs, "order_id", r.Delivery.OrderID.String(), "correlation_id", r.Delivery.CorrelationID)
	}
	switch o.status {
	case StatusSucceeded:
		m.successLatency.Observe(time.Since(r.Delivery.MessageCreatedAt).Seconds())
		m.attemptsPerMsg.Observe(float64(r.Number))
		d.logger.DebugContext(ctx, "webhook delivered", attrs...)
	case StatusDead:
		m.attemptsPerMsg.Observe(float64(r.Number))
		m.deadLetters.WithLabelValues(o.reason).Inc()
		d.logger.WarnContext(ctx, "webhook delivery dead", append(attrs, "reason", o.reason)...)
	case StatusNeedsReview:
		m.attemptsPerMsg.Observe(float64(r.Number))
		m.needsReview.WithLabelValues(r.Class).Inc()
		d.logger.WarnContext(ctx, "webhook delivery needs review: terminal answer", attrs...)
	default:
		d.logger.InfoContext(ctx, "webhook attempt failed; will retry", append(attrs, "retry_in_ms", o.delay.Milliseconds())...)
	}
}

// statsLoop refreshes the gauges.
func (d *Dispatcher) statsLoop(ctx context.Context) {
	for {
		d.refreshStats(ctx)
		if !sleep(ctx, statsInterval) {
			return
		}
	}
}

func (d *Dispatcher) refreshStats(ctx context.Context) {
	age, err := d.q.WebhookDeliveryStats(ctx, d.pool)
	if err == nil {
		d.metrics.oldestPending.Set(age)
	}
	c, err2 := d.q.WebhookEndpointCircuitCounts(ctx, d.pool)
	if err2 == nil {
		d.metrics.endpointsByState.WithLabelValues("closed").Set(float64(c.Closed))
		d.metrics.endpointsByState.WithLabelValues("open").Set(float64(c.Open))
		d.metrics.endpointsByState.WithLabelValues("half_open").Set(float64(c.HalfOpen))
		d.metrics.endpointsByState.WithLabelValues("disabled").Set(float64(c.Disabled))
	}
	review, err3 := d.q.WebhookDeliveryReviewCount(ctx, d.pool)
	if err3 == nil {
		d.metrics.needingReview.Set(float64(review))
	}
	if err := errors.Join(err, err2, err3); err != nil && ctx.Err() == nil {
		d.logger.WarnContext(ctx, "refresh webhook gauges", "error", err.Error())
	}
}

// sleep waits for d or until ctx is done; it reports whether ctx is still
// live.
func sleep(ctx context.Context, d time.Duration) bool { return backoff.Sleep(ctx, d) == nil }
