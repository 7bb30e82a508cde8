package waitingroom

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime/metrics"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/platform/backoff"
	"boxoffice/platform/promreg"
	"boxoffice/sqlcgen"
)

// Signals are what the release controller measures of the purchase cell.
type Signals struct {
	// HoldP99 is the 99th percentile latency of holds over the last
	// window.
	HoldP99 time.Duration
	// PoolWait is the mean time a database connection acquire waited
	// since the last reading.
	PoolWait time.Duration
	// OutboxAge is the age of the oldest event not yet on the bus.
	OutboxAge time.Duration
	// ConsumerPending is messages the durable consumers have not acked.
	ConsumerPending int64
	// ActiveHolds is live holds in the cell's database.
	ActiveHolds int64
	// LockWaits is the sessions of the cell's database waiting for a
	// lock (a row lock, mostly) at the reading: writers queueing on each
	// other. Sessions of other users show only to a member of
	// pg_read_all_stats (or a superuser).
	LockWaits int64
	// Deadlocks is the deadlocks the cell's database detected since the
	// last reading (none at the first).
	Deadlocks int64
	// PublishRetries is the outbox rows waiting out a retry after the
	// relay failed to publish them (up to 1,000): the bus refusing or not
	// answering.
	PublishRetries int64
	// ExpiryDelay is how long past its expiry the oldest hold still
	// active is: the expiry worker falling behind keeps seats from buyers
	// who could have them.
	ExpiryDelay time.Duration
	// SchedLatency is the 99th percentile of how long this process's
	// goroutines waited, runnable, for a CPU since the last reading (Go's
	// /sched/latencies:seconds). It is the queueing no handler sees:
	// a request whose goroutine waits to run, before or inside the
	// handler, because the polls, the streams or other processes on the
	// machine have the CPUs.
	SchedLatency time.Duration
}

// SignalSource reads the signals. Implementations read the real sources;
// tests use the real ones too. With an error, the Signals returned are
// those that could be read (the others zero).
type SignalSource interface {
	ReadSignals(ctx context.Context) (Signals, error)
}

// decreaseObserver is a SignalSource told of each cut of R, so that it
// reads its windowed signals afresh from then on (CellSignals).
type decreaseObserver interface {
	Decreased(t time.Time)
}

// CellSignals reads the signals from this process and the cell's
// PostgreSQL: the outbox and live holds from the database, the pool's
// acquire waits from its statistics, hold latency from a LatencyWindow the
// hold handler feeds, and consumer pending from an optional function.
type CellSignals struct {
	pool    *pgxpool.Pool
	holds   *LatencyWindow
	pending func(context.Context) (int64, error)

	mu        sync.Mutex
	lastWait  time.Duration
	lastCount int64
	sched     schedLatency
	// deadlocks is the database's deadlock counter at the last reading;
	// -1 before the first.
	deadlocks int64
}

// NewCellSignals returns a SignalSource. holds and pending may be nil.
func NewCellSignals(pool *pgxpool.Pool, holds *LatencyWindow, pending func(context.Context) (int64, error)) *CellSignals {
	return &CellSignals{pool: pool, holds: holds, pending: pending, deadlocks: -1}
}

// ReadSignals implements SignalSource. The signals this process keeps
// (hold latency, the pool's acquire waits, scheduling latency) are read
// first and returned even when the database's or the bus's cannot be
// read: a pool so busy that the reading itself times out shows as the
// pool wait it is, not only as an error.
func (c *CellSignals) ReadSignals(ctx context.Context) (Signals, error) {
	var s Signals
	if c.holds != nil {
		s.HoldP99 = c.holds.Quantile(0.99)
	}
	st := c.pool.Stat()
	wait := st.EmptyAcquireWaitTime()
	c.mu.Lock()
	if n := st.AcquireCount() - c.lastCount; n > 0 {
		s.PoolWait = (wait - c.lastWait) / time.Duration(n)
	}
	c.lastWait, c.lastCount = wait, st.AcquireCount()
	s.SchedLatency = c.sched.p99SinceLast()
	c.mu.Unlock()

	row, err := sqlcgen.New().OnsaleSignals(ctx, c.pool)
	if err != nil {
		return s, fmt.Errorf("read cell signals: %w", err)
	}
	s.OutboxAge = time.Duration(row.OldestOutboxAgeSeconds * float64(time.Second))
	s.ActiveHolds = row.ActiveHolds
	s.ExpiryDelay = time.Duration(row.ExpiryDelaySeconds * float64(time.Second))
	s.PublishRetries = row.PublishRetries
	var deadlocks int64
	if err := c.pool.QueryRow(ctx, serverSignalsSQL).Scan(&s.LockWaits, &deadlocks); err != nil {
		return s, fmt.Errorf("read cell signals: %w", err)
	}
	c.mu.Lock()
	if c.deadlocks >= 0 {
		s.Deadlocks = max(deadlocks-c.deadlocks, 0)
	}
	c.deadlocks = deadlocks
	c.mu.Unlock()
	if c.pending != nil {
		if s.ConsumerPending, err = c.pending(ctx); err != nil {
			return s, fmt.Errorf("read consumer pending: %w", err)
		}
	}
	return s, nil
}

// serverSignalsSQL reads PostgreSQL's own statistics of the cell's
// database: the sessions waiting for a lock now, and the deadlocks
// detected so far (a counter). They are the server's views, no package's
// table, so they are read here rather than through sqlcgen (whose catalog
// does not know them).
const serverSignalsSQL = `SELECT
  (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'),
  coalesce((SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()), 0)`

// Decreased tells the signals that the controller cut R at t: the hold
// latencies observed before t no longer count, so the samples that caused
// one cut do not cause the next ones (with a 10-second window, one slow
// second used to halve R at every reading for 10 seconds, down to Min).
func (c *CellSignals) Decreased(t time.Time) {
	if c.holds != nil {
		c.holds.Forget(t)
	}
}

// schedLatency reads Go's scheduling-latency histogram and returns the
// 99th percentile of the waits since the previous reading.
type schedLatency struct {
	sample []metrics.Sample
	last   []uint64
}

const schedLatencyMetric = "/sched/latencies:seconds"

func (l *schedLatency) p99SinceLast() time.Duration {
	if l.sample == nil {
		l.sample = []metrics.Sample{{Name: schedLatencyMetric}}
	}
	metrics.Read(l.sample)
	if l.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0
	}
	h := l.sample[0].Value.Float64Histogram()
	delta := make([]uint64, len(h.Counts))
	var total uint64
	for i, n := range h.Counts {
		if i < len(l.last) {
			n -= l.last[i]
		}
		delta[i] = n
		total += n
	}
	l.last = append(l.last[:0], h.Counts...)
	if total == 0 {
		return 0
	}
	// The bucket holding the 99th percentile; report its upper bound
	// (the lower one when the upper is +Inf).
	want := uint64(math.Ceil(0.99 * float64(total)))
	var seen uint64
	for i, n := range delta {
		if seen += n; seen >= want {
			hi := h.Buckets[i+1]
			if math.IsInf(hi, 1) {
				hi = h.Buckets[i]
			}
			return time.Duration(hi * float64(time.Second))
		}
	}
	return 0
}

// LatencyWindow keeps the latencies of the last few seconds for a
// quantile: a ring of per-second buckets of samples, each capped.
type LatencyWindow struct {
	mu      sync.Mutex
	window  time.Duration
	samples []sample
	next    int
	since   time.Time
}

type sample struct {
	at time.Time
	d  time.Duration
}

// NewLatencyWindow keeps up to 4096 samples of the last window.
func NewLatencyWindow(window time.Duration) *LatencyWindow {
	return &LatencyWindow{window: window, samples: make([]sample, 0, 4096)}
}

// Observe records one latency.
func (w *LatencyWindow) Observe(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := sample{at: time.Now(), d: d}
	if len(w.samples) < cap(w.samples) {
		w.samples = append(w.samples, s)
		return
	}
	w.samples[w.next] = s
	w.next = (w.next + 1) % len(w.samples)
}

// Quantile returns the q-quantile of the samples within the window, 0
// when there are none.
func (w *LatencyWindow) Quantile(q float64) time.Duration {
	w.mu.Lock()
	cutoff := time.Now().Add(-w.window)
	if w.since.After(cutoff) {
		cutoff = w.since
	}
	ds := make([]time.Duration, 0, len(w.samples))
	for _, s := range w.samples {
		if s.at.After(cutoff) {
			ds = append(ds, s.d)
		}
	}
	w.mu.Unlock()
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// Forget drops the samples observed before t from every later Quantile.
func (w *LatencyWindow) Forget(t time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t.After(w.since) {
		w.since = t
	}
}

// Thresholds are the signal levels above which the controller cuts R:
// one level for each of the Signals, so a signal added there has its
// threshold here. A zero field takes its default:
//
//   - HoldP99: 500ms.
//   - PoolWait: 50ms.
//   - OutboxAge: 2s.
//   - ConsumerPending: 10,000.
//   - ActiveHolds: 50,000.
//   - LockWaits: 16, a pool's worth of sessions queueing on locks: hot
//     seats contended beyond what the writer serves in turn.
//   - Deadlocks: 1: any deadlock since the last reading.
//   - PublishRetries: 1: any event waiting out a failed publish means the
//     bus is refusing writes, and everything admitted now waits behind it.
//   - ExpiryDelay: 10s: expired holds keep their seats that much longer
//     than they should.
//   - SchedLatency: 100ms: a fifth of the hold budget spent waiting for a
//     CPU is a cell that admits too many, whatever its handlers measure.
type Thresholds Signals

// ControllerConfig configures NewController.
type ControllerConfig struct {
	// Signals is read every Interval. Nil keeps R fixed at Initial.
	Signals SignalSource
	// Thresholds are the limits; zero fields take their defaults.
	Thresholds Thresholds
	// Interval between readings. Defaults to 500ms.
	Interval time.Duration
	// Initial R, admissions per second. Defaults to 200.
	Initial float64
	// Min is the floor R never goes below. Defaults to 5.
	Min float64
	// Max is the ceiling. Defaults to 5,000.
	Max float64
	// Increase is added to R per healthy reading while buyers wait.
	// Defaults to 10.
	Increase float64
	// Decrease multiplies R on a reading with a signal over its
	// threshold. Defaults to 0.5.
	Decrease float64
	// DemandFunc says whether buyers are waiting anywhere; R rises only
	// then, so an idle cell does not drift to Max. Defaults to always.
	DemandFunc func() bool
	// Logger logs each change of R. Required.
	Logger *slog.Logger
	// Registerer receives the controller's metrics. Defaults to none.
	Registerer prometheus.Registerer
}

// Reasons for R's last change; a fixed set, also the metric labels.
const (
	ReasonInitial            = "initial"
	ReasonHealthy            = "healthy"
	ReasonHoldP99            = "hold_p99"
	ReasonPoolWait           = "pool_wait"
	ReasonOutboxAge          = "outbox_age"
	ReasonConsumerPending    = "consumer_pending"
	ReasonActiveHolds        = "active_holds"
	ReasonSchedLatency       = "sched_latency"
	ReasonLockWaits          = "lock_waits"
	ReasonDeadlocks          = "deadlocks"
	ReasonPublishRetries     = "publish_retries"
	ReasonExpiryDelay        = "expiry_delay"
	ReasonSignalsUnavailable = "signals_unavailable"
)

var reasons = []string{ReasonInitial, ReasonHealthy, ReasonHoldP99, ReasonPoolWait, ReasonOutboxAge,
	ReasonConsumerPending, ReasonActiveHolds, ReasonSchedLatency, ReasonLockWaits, ReasonDeadlocks,
	ReasonPublishRetries, ReasonExpiryDelay, ReasonSignalsUnavailable}

// ControllerState is the controller's last decision.
type ControllerState struct {
	Rate      float64
	Reason    string
	Detail    string
	ChangedAt time.Time
	Signals   Signals
}

// Controller is the release controller: it adapts R, the cell's admission
// rate, by AIMD — multiplying it by Decrease at once when any signal crosses
// its threshold, adding Increase per healthy reading while buyers wait.
type Controller struct {
	cfg ControllerConfig

	mu    sync.Mutex
	state ControllerState

	rate    prometheus.Gauge
	reason  *prometheus.GaugeVec
	changes *prometheus.CounterVec
	signals *prometheus.GaugeVec
}

// DefaultInitialRate and DefaultMaxRate are R's start and ceiling,
// admissions per second, when ControllerConfig leaves them zero (and the
// defaults of BOXOFFICE_ADMISSION_RATE and BOXOFFICE_ADMISSION_RATE_MAX).
const (
	DefaultInitialRate = 200
	DefaultMaxRate     = 5000
)

// orDefault sets *v to d when it is not positive: a zero (or negative)
// setting takes its default.
func orDefault[T ~float64 | ~int64](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// NewController returns a controller at cfg.Initial.
func NewController(cfg ControllerConfig) *Controller {
	orDefault(&cfg.Initial, DefaultInitialRate)
	orDefault(&cfg.Min, 5)
	orDefault(&cfg.Max, DefaultMaxRate)
	orDefault(&cfg.Increase, 10)
	if cfg.Decrease <= 0 || cfg.Decrease >= 1 {
		cfg.Decrease = 0.5
	}
	orDefault(&cfg.Interval, 500*time.Millisecond)
	t := &cfg.Thresholds
	orDefault(&t.HoldP99, 500*time.Millisecond)
	orDefault(&t.PoolWait, 50*time.Millisecond)
	orDefault(&t.OutboxAge, 2*time.Second)
	orDefault(&t.ConsumerPending, 10_000)
	orDefault(&t.ActiveHolds, 50_000)
	orDefault(&t.SchedLatency, 100*time.Millisecond)
	orDefault(&t.LockWaits, 16)
	orDefault(&t.Deadlocks, 1)
	orDefault(&t.PublishRetries, 1)
	orDefault(&t.ExpiryDelay, 10*time.Second)
	if cfg.DemandFunc == nil {
		cfg.DemandFunc = func() bool { return true }
	}
	c := &Controller{
		cfg:   cfg,
		state: ControllerState{Rate: cfg.Initial, Reason: ReasonInitial, ChangedAt: time.Now()},
		rate: promreg.Gauge(cfg.Registerer, "boxoffice_admission_rate",
			"R: admissions per second the release controller allows the cell, before organizers' caps."),
		reason: promreg.GaugeVec(cfg.Registerer, "boxoffice_admission_rate_reason",
			"1 for the reason of R's last change, 0 for the others.", "reason"),
		changes: promreg.CounterVec(cfg.Registerer, "boxoffice_admission_rate_changes_total",
			"Changes of R by reason: a signal over its threshold (decrease) or healthy (increase).", "reason"),
		signals: promreg.GaugeVec(cfg.Registerer, "boxoffice_admission_signal",
			"The release controller's last reading of each signal (seconds for latencies and ages).", "signal"),
	}
	promreg.Gauge(cfg.Registerer, "boxoffice_admission_rate_floor",
		"The floor R never goes below: R pinned there means a signal keeps the cell over its threshold.").Set(cfg.Min)
	c.publish()
	return c
}

// Rate returns R.
func (c *Controller) Rate() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state.Rate
}

// State returns the last decision.
func (c *Controller) State() ControllerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

func (c *Controller) publish() {
	c.rate.Set(c.state.Rate)
	for _, r := range reasons {
		v := 0.0
		if r == c.state.Reason {
			v = 1
		}
		c.reason.WithLabelValues(r).Set(v)
	}
}

// Run reads the signals every Interval and adapts R until ctx is done. It
// returns nil at once when there are no signals to read.
func (c *Controller) Run(ctx context.Context) error {
	if c.cfg.Signals == nil {
		return nil
	}
	return backoff.Ticks(ctx, c.cfg.Interval, func(ctx context.Context) error {
		readCtx, cancel := context.WithTimeout(ctx, max(c.cfg.Interval, time.Second))
		s, err := c.cfg.Signals.ReadSignals(readCtx)
		cancel()
		if ctx.Err() == nil {
			c.Step(ctx, s, err)
		}
		return nil
	})
}

// breach returns the first signal over its threshold.
func (c *Controller) breach(s Signals) (string, string) {
	t := c.cfg.Thresholds
	switch {
	case s.OutboxAge > t.OutboxAge:
		return ReasonOutboxAge, fmt.Sprintf("oldest outbox event %s > %s", s.OutboxAge.Round(time.Millisecond), t.OutboxAge)
	case s.HoldP99 > t.HoldP99:
		return ReasonHoldP99, fmt.Sprintf("hold p99 %s > %s", s.HoldP99.Round(time.Millisecond), t.HoldP99)
	case s.PoolWait > t.PoolWait:
		return ReasonPoolWait, fmt.Sprintf("database pool wait %s > %s", s.PoolWait.Round(time.Millisecond), t.PoolWait)
	case s.ConsumerPending > t.ConsumerPending:
		return ReasonConsumerPending, fmt.Sprintf("consumer pending %d > %d", s.ConsumerPending, t.ConsumerPending)
	case s.ActiveHolds > t.ActiveHolds:
		return ReasonActiveHolds, fmt.Sprintf("active holds %d > %d", s.ActiveHolds, t.ActiveHolds)
	case s.Deadlocks >= t.Deadlocks:
		return ReasonDeadlocks, fmt.Sprintf("%d deadlocks since the last reading", s.Deadlocks)
	case s.LockWaits >= t.LockWaits:
		return ReasonLockWaits, fmt.Sprintf("%d sessions waiting for a lock ≥ %d", s.LockWaits, t.LockWaits)
	case s.PublishRetries >= t.PublishRetries:
		return ReasonPublishRetries, fmt.Sprintf("%d events waiting out a failed publish", s.PublishRetries)
	case s.ExpiryDelay > t.ExpiryDelay:
		return ReasonExpiryDelay, fmt.Sprintf("oldest active hold %s past its expiry > %s", s.ExpiryDelay.Round(time.Millisecond), t.ExpiryDelay)
	case s.SchedLatency > t.SchedLatency:
		return ReasonSchedLatency, fmt.Sprintf("scheduling latency p99 %s > %s", s.SchedLatency.Round(time.Millisecond), t.SchedLatency)
	}
	return "", ""
}

// Step applies one reading: err (some signals could not be read) counts as
// a breach, so a cell whose database stops answering admits less. Its
// reason is a signal of s over its threshold where one is (what could be
// read: a saturated pool's wait, say, when the database's signals timed
// out behind it), else signals_unavailable.
func (c *Controller) Step(ctx context.Context, s Signals, err error) {
	reason, detail := c.breach(s)
	if err != nil {
		if reason == "" {
			reason, detail = ReasonSignalsUnavailable, "signals could not be read"
		} else {
			detail += "; other signals could not be read"
		}
		c.cfg.Logger.WarnContext(ctx, "release controller: read signals", "error", err.Error())
	}
	c.signals.WithLabelValues("hold_p99_seconds").Set(s.HoldP99.Seconds())
	c.signals.WithLabelValues("pool_wait_seconds").Set(s.PoolWait.Seconds())
	c.signals.WithLabelValues("outbox_age_seconds").Set(s.OutboxAge.Seconds())
	c.signals.WithLabelValues("consumer_pending").Set(float64(s.ConsumerPending))
	c.signals.WithLabelValues("active_holds").Set(float64(s.ActiveHolds))
	c.signals.WithLabelValues("sched_latency_seconds").Set(s.SchedLatency.Seconds())
	c.signals.WithLabelValues("lock_waits").Set(float64(s.LockWaits))
	c.signals.WithLabelValues("deadlocks").Set(float64(s.Deadlocks))
	c.signals.WithLabelValues("publish_retries").Set(float64(s.PublishRetries))
	c.signals.WithLabelValues("expiry_delay_seconds").Set(s.ExpiryDelay.Seconds())

	c.mu.Lock()
	defer c.mu.Unlock()
	c.state.Signals = s
	old := c.state.Rate
	next := old
	switch {
	case reason != "":
		next = max(c.cfg.Min, old*c.cfg.Decrease)
	case c.cfg.DemandFunc():
		next = min(c.cfg.Max, old+c.cfg.Increase)
		reason, detail = ReasonHealthy, fmt.Sprintf("all signals under their thresholds: +%g/s", c.cfg.Increase)
	}
	if next == old {
		return
	}
	c.state.Rate, c.state.Reason, c.state.Detail, c.state.ChangedAt = next, reason, detail, time.Now()
	if d, ok := c.cfg.Signals.(decreaseObserver); ok && next < old {
		d.Decreased(c.state.ChangedAt)
	}
	c.changes.WithLabelValues(reason).Inc()
	c.publish()
	level := slog.LevelDebug
	if next < old {
		level = slog.LevelWarn
	}
	c.cfg.Logger.Log(ctx, level, "admission rate changed", "rate", next, "previous_rate", old, "reason", reason, "detail", detail)
}
