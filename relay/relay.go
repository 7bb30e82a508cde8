package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/semaphore"

	"boxoffice/platform/backoff"
	"boxoffice/platform/bus"
	"boxoffice/platform/outbox"
	"boxoffice/platform/telemetry"
)

// Timing the relay does not expose as configuration.
const (
	// minRetryBackoff and maxRetryBackoff bound how long rows whose publish
	// failed wait before any relay claims them again, and how long the
	// relay pauses before claiming after a failed batch. The backoff doubles
	// with each consecutive failed batch. maxRetryBackoff must stay far
	// below bus.Config.Duplicates (15m) so that a retried row is still
	// deduplicated.
	minRetryBackoff = 100 * time.Millisecond
	maxRetryBackoff = 10 * time.Second
	// minIdle is the first sleep after a claim finds nothing; sleeps double
	// up to Config.IdleInterval while the outbox stays empty.
	minIdle = time.Millisecond
	// disconnectedPoll is how often the relay checks whether NATS is back.
	disconnectedPoll = 100 * time.Millisecond
	// warnInterval is the least time between two warnings of one kind.
	warnInterval = 10 * time.Second
	// dbTimeout bounds each statement the relay runs.
	dbTimeout = 10 * time.Second
	// ackGrace is added to AckTimeout before the relay stops waiting for a
	// batch's acks itself; the client times each publish out at AckTimeout.
	ackGrace = 250 * time.Millisecond
)

// Config configures New. The zero value is usable.
type Config struct {
	// ID names this relay in its outbox leases and in logs. It must differ
	// between relays running at the same time. Defaults to
	// hostname:pid:random.
	ID string
	// BatchSize is the most rows one claim takes. Defaults to 1000.
	BatchSize int
	// Lease is how long a claim holds its rows. If the relay dies holding
	// them, other relays publish them once the lease has expired. It must
	// exceed AckTimeout, or rows that are merely slow to be acknowledged
	// get republished (harmless — JetStream drops the copy — but wasted).
	// Defaults to 30s.
	Lease time.Duration
	// MaxInFlight bounds the rows claimed and not yet settled (marked
	// published or released), and so the async publishes awaiting an ack;
	// it is also the JetStream client's async publish window. Defaults to
	// 4096.
	MaxInFlight int
	// AckTimeout is how long the relay waits for JetStream to acknowledge
	// a batch. Rows not acknowledged by then are released for a retry.
	// Defaults to 10s.
	AckTimeout time.Duration
	// IdleInterval is the longest the relay sleeps between two claims while
	// the outbox is empty. After a claim that found rows it claims again at
	// once; while claims find nothing the sleeps grow from 1ms to
	// IdleInterval, so an idle relay costs a few cheap queries a second and
	// a busy one adds at most a few milliseconds of latency. Defaults to
	// 50ms.
	IdleInterval time.Duration
	// StatsInterval is how often the backlog gauges are refreshed, by a
	// query whose cost grows with the backlog. Used only with a
	// Registerer. Defaults to 5s.
	StatsInterval time.Duration
	// Logger receives the relay's structured logs, scoped with
	// component=relay and relay_id. Envelopes are never logged. Defaults to
	// discarding logs.
	Logger *slog.Logger
	// Registerer receives the relay's metrics. Relays sharing a registerer
	// share their collectors. Defaults to nil: no metrics, and no stats
	// query.
	Registerer prometheus.Registerer
	// Bus is the namespace the relay publishes into: each row's subject
	// (stored in default terms) is mapped with Bus.Subject, and JetStream
	// must store it in Bus.Stream(). Defaults to the default namespace
	// (stream TICKETING, subjects unchanged).
	Bus bus.Namespace
}

func (c Config) withDefaults() Config {
	if c.ID == "" {
		c.ID = defaultID()
	}
	c.BatchSize = cmp.Or(c.BatchSize, 1000)
	c.Lease = cmp.Or(c.Lease, 30*time.Second)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, 4096)
	c.AckTimeout = cmp.Or(c.AckTimeout, 10*time.Second)
	c.IdleInterval = cmp.Or(c.IdleInterval, 50*time.Millisecond)
	c.StatsInterval = cmp.Or(c.StatsInterval, 5*time.Second)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	return c
}

// Validate reports a configuration New would refuse: a negative size or
// duration, or a Lease not longer than AckTimeout. Zero values stand for
// their defaults and are valid.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{{"BatchSize", c.BatchSize}, {"MaxInFlight", c.MaxInFlight}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("relay: %s must not be negative, got %d", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"Lease", c.Lease}, {"AckTimeout", c.AckTimeout}, {"IdleInterval", c.IdleInterval}, {"StatsInterval", c.StatsInterval}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("relay: %s must not be negative, got %s", f.name, f.v))
		}
	}
	if c.Lease <= c.AckTimeout {
		errs = append(errs, fmt.Errorf("relay: Lease (%s) must exceed AckTimeout (%s)", c.Lease, c.AckTimeout))
	}
	return errors.Join(errs...)
}

func defaultID() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("%s:%d:%08x", host, os.Getpid(), rand.Uint32())
}

// Relay publishes outbox rows to JetStream. See the package documentation
// for what it guarantees.
type Relay struct {
	pool    *pgxpool.Pool
	nc      *nats.Conn
	js      jetstream.JetStream
	cfg     Config
	logger  *slog.Logger
	metrics *metrics
	warn    *throttle
	// failures counts consecutive batches in which nothing was acknowledged
	// and something failed for a reason that may pass; it sets the retry
	// backoff and pauses claiming.
	failures atomic.Int64
	// afterPublishFunc, set only by tests (export_test.go), runs after a
	// batch's acks and before it is marked; an error from it stops Run as
	// a crash would.
	afterPublishFunc func(ctx context.Context, ids []uuid.UUID) error
	// running guards against a second Run.
	running atomic.Bool
	// claims counts claims, to start every headScanEvery-th from the true
	// head, atTail says the last claim came back short, and floor is where
	// the other scans from the head start: the first seq the last one
	// found (nothing below it was claimable then). Only claimLoop touches
	// them.
	claims int
	atTail bool
	floor  int64
}

// New returns a relay that claims rows from pool and publishes them over
// nc. It takes the connection rather than a jetstream.JetStream because it
// opens its own JetStream context, whose async publish window
// (MaxInFlight) and publish timeout (AckTimeout) are its own; nc may be
// shared with the rest of the process, and should reconnect forever
// (bus.Connect). New returns an error when cfg is invalid (see
// Config.Validate) or its metrics clash with collectors already registered.
func New(pool *pgxpool.Pool, nc *nats.Conn, cfg Config) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxInFlight),
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout),
	)
	if err != nil {
		return nil, fmt.Errorf("relay: open jetstream: %w", err)
	}
	m := newMetrics(cfg.Registerer)
	return &Relay{
		pool:    pool,
		nc:      nc,
		js:      js,
		cfg:     cfg,
		logger:  cfg.Logger.With("component", "relay", "relay_id", cfg.ID),
		metrics: m,
		warn:    newThrottle(warnInterval),
	}, nil
}

// ID returns the name the relay's leases carry.
func (r *Relay) ID() string { return r.cfg.ID }

// batch is one claim on its way through the relay.
type batch struct {
	claimedAt time.Time
	sentAt    time.Time
	rows      []outbox.Claimed
	// leaseFirst is the first seq of the batch's lease (its key).
	leaseFirst int64
	// futures[i] is rows[i]'s pending ack, or nil if it was never sent.
	futures []jetstream.PubAckFuture
	sendErr error
	// spans[i] is rows[i]'s publish span when its row carries a trace
	// (tracing on); nil otherwise.
	spans []trace.Span
}

// crashError carries an error from afterPublishFunc out of Run.
type crashError struct{ err error }

func (e *crashError) Error() string { return "relay crashed: " + e.err.Error() }

// Run publishes outbox rows until ctx is done and returns nil once it has
// stopped: it claims nothing more, waits (at most AckTimeout) for the acks
// of the batches already published, deletes them, and releases every row it
// claimed but could not publish, so other relays take them at once instead
// of after the lease. Errors from the database or NATS never end Run; they
// are logged, counted and retried with backoff. Run may be called only
// once; a second call returns an error at once.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("relay: Run called twice")
	}
	loopCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	r.logger.InfoContext(ctx, "relay started",
		"batch_size", r.cfg.BatchSize, "max_in_flight", r.cfg.MaxInFlight,
		"lease", r.cfg.Lease.String(), "ack_timeout", r.cfg.AckTimeout.String(),
		"stream", r.cfg.Bus.Stream())

	// Three stages, so that claiming the next batch, publishing this one
	// and marking the previous one overlap: claimLoop → publishLoop →
	// settleLoop. Semaphore tokens are rows: a claim takes BatchSize, gives
	// back what it did not get, and settling a batch gives back the rest,
	// so at most MaxInFlight rows are claimed and unsettled at any time.
	sem := semaphore.NewWeighted(int64(r.cfg.MaxInFlight))
	claimed := make(chan *batch, 4)
	published := make(chan *batch, 64)
	var wg sync.WaitGroup
	wg.Go(func() { r.publishLoop(loopCtx, claimed, published) })
	wg.Go(func() { r.settleLoop(ctx, published, sem, stop) })
	if r.metrics.enabled {
		wg.Go(func() { r.statsLoop(loopCtx) })
	}
	r.claimLoop(loopCtx, claimed, sem)
	close(claimed)
	wg.Wait()

	if ce, ok := errors.AsType[*crashError](context.Cause(loopCtx)); ok {
		return ce.err
	}
	r.logger.InfoContext(ctx, "relay stopped")
	return nil
}

// claimLoop claims batches until ctx is done and hands each to
// publishLoop.
func (r *Relay) claimLoop(ctx context.Context, claimed chan<- *batch, sem *semaphore.Weighted) {
	want := min(r.cfg.BatchSize, r.cfg.MaxInFlight)
	idleSchedule := backoff.Policy{Base: minIdle, Max: r.cfg.IdleInterval}
	var empties int
	var dbFailures int64
	var pausedAt time.Time
	for ctx.Err() == nil {
		if !r.nc.IsConnected() {
			if pausedAt.IsZero() {
				pausedAt = time.Now()
			}
			r.warnContext(ctx, "nats", "nats unreachable; not claiming, the outbox grows until it returns",
				"nats_status", r.nc.Status().String())
			sleep(ctx, disconnectedPoll)
			continue
		}
		if !pausedAt.IsZero() {
			r.logger.InfoContext(ctx, "nats reachable; claiming again", "paused", time.Since(pausedAt).Round(time.Millisecond).String())
			pausedAt = time.Time{}
		}
		if n := r.failures.Load(); n > 0 {
			// The last batch failed: let NATS recover before the next claim
			// fails the same way.
			if !sleep(ctx, retrySchedule.Delay(int(n))) {
				break
			}
		}
		if err := sem.Acquire(ctx, int64(want)); err != nil {
			break
		}
		claimedAt := time.Now()
		rows, leaseFirst, err := r.claim(ctx, want)
		sem.Release(int64(want - len(rows)))
		if err != nil {
			dbFailures++
			r.warnContext(ctx, "claim", "claim outbox batch", "error", err.Error())
			sleep(ctx, retrySchedule.Delay(int(dbFailures)))
			continue
		}
		dbFailures = 0
		if len(rows) == 0 {
			empties++
			sleep(ctx, idleSchedule.Delay(empties))
			continue
		}
		empties = 0
		if ctx.Err() != nil {
			// Stopped while claiming: hand the rows back unpublished, unless
			// this is a simulated crash, which leaves them to their lease.
			if !crashed(ctx) {
				r.endLease(ctx, leaseFirst)
			}
			sem.Release(int64(len(rows)))
			break
		}
		claimed <- &batch{claimedAt: claimedAt, rows: rows, leaseFirst: leaseFirst}
	}
}

// publishLoop publishes each claimed batch and hands it to settleLoop,
// until claimed is closed. Batches claimed before a graceful stop are still
// published and settled; after a simulated crash they are dropped.
func (r *Relay) publishLoop(ctx context.Context, claimed <-chan *batch, published chan<- *batch) {
	defer close(published)
	for b := range claimed {
		if crashed(ctx) {
			continue
		}
		r.publish(b)
		published <- b
	}
}

// headScanEvery is how often (in claims) a claim starts from the true head
// of the outbox (seq 0) instead of above the highest live lease or the
// relay's floor, to pick up rows those cannot see: rows committed after a
// claim passed their seq, rows back from a retry backoff, rows of an
// expired lease. At the tail of the outbox every claim starts from the
// head, at the floor: the head at seq 0 would walk every row published and
// deleted since the last vacuum, which was most of a claim's cost.
const headScanEvery = 16

// claim leases up to n rows, oldest first, and returns them sorted by seq
// with the first seq of their lease. It is one statement, and one round
// trip: outbox_claim (migrations/functions/outbox_claim.sql), run on the
// pool as a transaction of its own, serialized with every other claim,
// reads the rows no live lease covers — above the highest live lease (the
// fast path, which skips the rows in flight), or from the head — at the
// relay's floor at the tail and whenever the fast path comes back short,
// at seq 0 every headScanEvery claims; a scan from the head also forgets
// expired leases — and writes one lease over
// their seq range. No row is updated. It is not cut short by ctx, so the
// relay always learns what it claimed.
func (r *Relay) claim(ctx context.Context, n int) ([]outbox.Claimed, int64, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbTimeout)
	defer cancel()
	r.claims++
	// At the tail (the last claim came back short) the fast path would
	// only find the same rows the head scan reads: go to the head at once.
	trueHead := r.claims%headScanEvery == 0
	headScan := trueHead || r.atTail
	floor := r.floor
	if trueHead {
		floor = 0
	}
	rows, err := outbox.Claim(ctx, r.pool, outbox.ClaimParams{
		RelayID: r.cfg.ID, MaxRows: int32(n), Lease: r.cfg.Lease, HeadScan: headScan, Floor: floor,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("claim outbox batch: %w", err)
	}
	r.atTail = len(rows) < n
	if len(rows) == 0 {
		return nil, 0, nil
	}
	if headScan {
		r.floor = rows[0].Seq
	}
	return rows, rows[0].Seq, nil
}

// publish sends every row of b without waiting for acks. The semaphore
// keeps the pending acks within the client's window, so sends do not stall.
func (r *Relay) publish(b *batch) {
	b.futures = make([]jetstream.PubAckFuture, len(b.rows))
	for i, row := range b.rows {
		msg := &nats.Msg{Subject: r.cfg.Bus.Subject(row.Subject), Data: row.Envelope, Header: make(nats.Header, 2)}
		if row.TraceParent != "" {
			r.startSpan(b, i, msg)
		}
		f, err := r.js.PublishMsgAsync(msg,
			jetstream.WithMsgID(row.ID.String()),
			jetstream.WithExpectStream(r.cfg.Bus.Stream()),
			jetstream.WithStallWait(r.cfg.AckTimeout),
		)
		if err != nil {
			if b.sendErr == nil {
				b.sendErr = err
			}
			continue
		}
		b.futures[i] = f
	}
	b.sentAt = time.Now()
}

// startSpan starts the publish span of b's row i, the child of the span
// that wrote the row, and puts it in msg's traceparent header for the
// consumers: the trace goes on from the outbox row to the bus. collect
// ends it with the row's ack.
func (r *Relay) startSpan(b *batch, i int, msg *nats.Msg) {
	row := b.rows[i]
	if b.spans == nil {
		b.spans = make([]trace.Span, len(b.rows))
	}
	ctx, span := telemetry.Tracer().Start(telemetry.Continue(context.Background(), row.TraceParent), "send "+msg.Subject,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String("nats"),
			semconv.MessagingOperationTypeSend,
			semconv.MessagingDestinationName(msg.Subject),
			semconv.MessagingMessageID(row.ID.String()),
			telemetry.EventID.String(row.ID.String()),
		))
	telemetry.InjectMessage(ctx, msg.Header)
	b.spans[i] = span
}

// endSpan ends b's row i's publish span, if it has one, with the row's
// fate.
func (b *batch) endSpan(i int, ack *jetstream.PubAck, err error) {
	if b.spans == nil || b.spans[i] == nil {
		return
	}
	if ack != nil {
		b.spans[i].SetAttributes(telemetry.StreamSeq.Int64(int64(ack.Sequence)))
	}
	telemetry.EndSpan(b.spans[i], err)
}

// settleLoop settles batches in the order they were published until
// published is closed. After a simulated crash it discards them.
func (r *Relay) settleLoop(ctx context.Context, published <-chan *batch, sem *semaphore.Weighted, stop context.CancelCauseFunc) {
	dead := false
	for b := range published {
		if dead {
			continue
		}
		if err := r.settle(ctx, b); err != nil {
			stop(&crashError{err: err})
			dead = true
			continue
		}
		sem.Release(int64(len(b.rows)))
	}
}

// outcome tallies a batch's acks.
type outcome struct {
	acked []outbox.Claimed
	// failed rows may succeed soon (timeouts, disconnects, no stream
	// listening, a stream without a leader); rejected rows were refused by
	// JetStream with a client error (4xx) and will likely be refused again.
	failed   []outbox.Claimed
	rejected []outbox.Claimed
	stored   int
	dups     int
	reasons  map[string]int
	firstErr error
}

func (o *outcome) fail(row outbox.Claimed, err error) {
	reason := reason(err)
	if reason == "rejected" {
		o.rejected = append(o.rejected, row)
	} else {
		o.failed = append(o.failed, row)
	}
	if o.reasons == nil {
		o.reasons = map[string]int{}
	}
	o.reasons[reason]++
	if o.firstErr == nil {
		o.firstErr = err
	}
}

// settle waits for b's acks, deletes the acknowledged rows and
// releases the others with backoff. It returns an error only from
// afterPublishFunc, and then leaves the batch as a crash would.
//
// A batch in which nothing was acknowledged and something failed for a
// reason that may pass means NATS is in trouble: it lengthens the backoff
// and pauses the claimer. Rows JetStream rejected (a subject outside the
// stream, a message too large) are retried only every maxRetryBackoff and
// never slow the other rows down.
func (r *Relay) settle(ctx context.Context, b *batch) error {
	o := r.collect(b)
	if len(o.acked) > 0 && r.afterPublishFunc != nil {
		if err := r.afterPublishFunc(ctx, ids(o.acked)); err != nil {
			return err
		}
	}

	streak := r.failures.Load()
	switch {
	case len(o.acked) > 0:
		streak = 0
		r.failures.Store(0)
	case len(o.failed) > 0:
		streak = r.failures.Add(1)
	}
	var retryIn time.Duration
	if len(o.failed) > 0 {
		retryIn = retrySchedule.Delay(int(max(streak, 1)))
	}
	// What JetStream answered is counted before the rows are marked, so
	// that whoever sees a row marked published also sees its publish
	// counted (TestCrashAfterPublishIsDedupedByJetStream read the
	// duplicates once the rows were marked, and once found none).
	r.metrics.published.Add(float64(o.stored))
	r.metrics.duplicates.Add(float64(o.dups))
	for reason, n := range o.reasons {
		r.metrics.publishErrors.WithLabelValues(reason).Add(float64(n))
	}
	marked := r.markPublished(ctx, b.leaseFirst, seqs(o.acked), seqs(o.failed), retryIn, seqs(o.rejected))

	r.metrics.batchSeconds.Observe(time.Since(b.claimedAt).Seconds())

	if r.logger.Enabled(ctx, slog.LevelDebug) {
		r.logger.DebugContext(ctx, "batch settled",
			"claimed", len(b.rows), "published", o.stored, "duplicates", o.dups,
			"marked", marked, "failed", len(o.failed), "rejected", len(o.rejected))
	}
	if len(o.failed) > 0 {
		r.warnContext(ctx, "publish", "publish failed; rows released for retry",
			"failed", len(o.failed), "claimed", len(b.rows), "error", o.firstErr.Error(),
			"retry_in", retryIn.String())
	}
	if len(o.rejected) > 0 {
		r.warnContext(ctx, "rejected", "jetstream rejected rows; retrying them every "+maxRetryBackoff.String(),
			"rejected", len(o.rejected), "claimed", len(b.rows), "error", o.firstErr.Error())
	}
	return nil
}

// seqs are rows' seqs, the outbox's key, by which a settle names them.
func seqs(rows []outbox.Claimed) []int64 {
	s := make([]int64, len(rows))
	for i, r := range rows {
		s[i] = r.Seq
	}
	return s
}

// ids are rows' event ids.
func ids(rows []outbox.Claimed) []uuid.UUID {
	s := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		s[i] = r.ID
	}
	return s
}

// errAckWait is recorded for rows whose ack the relay stopped waiting for.
var errAckWait = errors.New("relay: no ack within AckTimeout")

// collect waits for each future of b until AckTimeout after b was sent.
func (r *Relay) collect(b *batch) outcome {
	o := outcome{acked: make([]outbox.Claimed, 0, len(b.rows))}
	deadline := time.NewTimer(time.Until(b.sentAt.Add(r.cfg.AckTimeout + ackGrace)))
	defer deadline.Stop()
	expired := false
	for i, f := range b.futures {
		row := b.rows[i]
		if f == nil {
			o.fail(row, &sendError{b.sendErr})
			b.endSpan(i, nil, &sendError{b.sendErr})
			continue
		}
		var ack *jetstream.PubAck
		var err error
		if expired {
			select {
			case ack = <-f.Ok():
			case err = <-f.Err():
			default:
				err = errAckWait
			}
		} else {
			select {
			case ack = <-f.Ok():
			case err = <-f.Err():
			case <-deadline.C:
				expired, err = true, errAckWait
			}
		}
		b.endSpan(i, ack, err)
		if err != nil {
			o.fail(row, err)
			continue
		}
		o.acked = append(o.acked, row)
		if ack.Duplicate {
			o.dups++
		} else {
			o.stored++
		}
	}
	return o
}

// sendError is a publish the client refused to send.
type sendError struct{ err error }

func (e *sendError) Error() string { return "send: " + e.err.Error() }
func (e *sendError) Unwrap() error { return e.err }

// reason maps a publish error to the bounded label of
// boxoffice_relay_publish_errors_total.
func reason(err error) string {
	switch {
	case isSendError(err):
		return "send"
	case errors.Is(err, errAckWait), errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		return "timeout"
	case errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionClosed):
		return "disconnected"
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return "no_responders"
	}
	if apiErr, ok := errors.AsType[*jetstream.APIError](err); ok {
		if apiErr.Code >= 500 {
			return "unavailable" // e.g. no stream leader, out of resources
		}
		return "rejected"
	}
	return "other"
}

// markPublished settles a batch in one statement, and one round trip:
// outbox_settle (migrations/functions/outbox_settle.sql), run on the pool
// as a transaction of its own, deletes the acknowledged rows acked
// (recording each one's commit-to-acknowledgement latency), makes failed
// rows wait retryIn and rejected ones maxRetryBackoff before they are
// claimed again, and ends the batch's lease. Rows are named by their seq,
// the outbox's key. It returns how many rows it deleted. On failure
// nothing changes: the lease expires, and a relay republishes the rows
// (JetStream drops the copies).
func (r *Relay) markPublished(ctx context.Context, leaseFirst int64, acked, failed []int64, retryIn time.Duration, rejected []int64) int64 {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbTimeout)
	defer cancel()
	latencies, err := outbox.Settle(ctx, r.pool, outbox.SettleParams{
		RelayID: r.cfg.ID, LeaseFirst: leaseFirst,
		Acked: acked, Failed: failed, RetryAfter: retryIn,
		Rejected: rejected, RejectAfter: maxRetryBackoff,
	})
	if err != nil {
		r.warnContext(ctx, "mark", "settle outbox batch; its rows will be republished after their lease",
			"rows", len(acked)+len(failed)+len(rejected), "error", err.Error())
		return 0
	}
	for _, l := range latencies {
		r.metrics.latency.Observe(l)
	}
	if lost := len(acked) - len(latencies); lost > 0 {
		r.logger.InfoContext(ctx, "acknowledged rows already deleted by another relay after this one's lease expired", "rows", lost)
	}
	return int64(len(latencies))
}

// endLease ends a lease whose rows were claimed and not published (the
// relay is stopping), so other relays take them at once instead of after
// the lease: a settle (outbox_settle) with no rows, one round trip. On
// failure they wait for the lease instead.
func (r *Relay) endLease(ctx context.Context, leaseFirst int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dbTimeout)
	defer cancel()
	_, err := outbox.Settle(ctx, r.pool, outbox.SettleParams{RelayID: r.cfg.ID, LeaseFirst: leaseFirst})
	if err != nil {
		r.warnContext(ctx, "release", "end outbox lease; its rows wait for it to expire instead", "error", err.Error())
	}
}

// statsLoop refreshes the backlog gauges every StatsInterval.
func (r *Relay) statsLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.StatsInterval)
	defer t.Stop()
	for {
		r.refreshStats(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Relay) refreshStats(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, dbTimeout)
	defer cancel()
	s, err := outbox.ReadStats(ctx, r.pool)
	if err != nil {
		if ctx.Err() == nil {
			r.warnContext(ctx, "stats", "read outbox stats", "error", err.Error())
		}
		return
	}
	r.metrics.backlog.Set(float64(s.Backlog))
	r.metrics.oldestAge.Set(s.OldestAgeSeconds)
}

// warnContext logs a warning unless one of the same kind was logged within
// warnInterval, and says how many were suppressed since.
func (r *Relay) warnContext(ctx context.Context, kind, msg string, args ...any) {
	ok, suppressed := r.warn.allow(kind, time.Now())
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed", suppressed)
	}
	r.logger.WarnContext(ctx, msg, args...)
}

// throttle lets one event per key through every interval and counts the
// ones it holds back.
type throttle struct {
	every      time.Duration
	mu         sync.Mutex
	next       map[string]time.Time
	suppressed map[string]int
}

func newThrottle(every time.Duration) *throttle {
	return &throttle{every: every, next: map[string]time.Time{}, suppressed: map[string]int{}}
}

func (t *throttle) allow(key string, now time.Time) (ok bool, suppressed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now.Before(t.next[key]) {
		t.suppressed[key]++
		return false, 0
	}
	t.next[key] = now.Add(t.every)
	suppressed = t.suppressed[key]
	t.suppressed[key] = 0
	return true, suppressed
}

// retrySchedule is the retry delay after n consecutive failures: doubling
// from minRetryBackoff, capped at maxRetryBackoff, then spread by ±20% so
// relays do not retry in lockstep (capped delays too).
var retrySchedule = backoff.Policy{Base: minRetryBackoff, Max: maxRetryBackoff, Jitter: backoff.Even(0.2)}

// sleep waits d or until ctx is done, and reports whether ctx is still
// live.
func sleep(ctx context.Context, d time.Duration) bool { return backoff.Sleep(ctx, d) == nil }

func isSendError(err error) bool {
	_, ok := errors.AsType[*sendError](err)
	return ok
}

func crashed(ctx context.Context) bool {
	_, ok := errors.AsType[*crashError](context.Cause(ctx))
	return ok
}
