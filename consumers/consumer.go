package consumers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	backoffpkg "boxoffice/platform/backoff"
	"boxoffice/platform/bus"
	"boxoffice/platform/outbox"
)

// Headers of a dead letter, besides the original message's own headers
// (those starting with "Nats-" are dropped).
const (
	// HeaderConsumer names the consumer that gave up on the message.
	HeaderConsumer = "Boxoffice-Consumer"
	// HeaderReason says why, in short text that holds no secrets.
	HeaderReason = "Boxoffice-Reason"
	// HeaderNumDelivered is how many deliveries the message had.
	HeaderNumDelivered = "Boxoffice-Num-Delivered"
	// HeaderOriginalSubject is the subject the message was published on.
	HeaderOriginalSubject = "Boxoffice-Original-Subject"
	// HeaderOriginalSequence is the message's sequence in the namespace's
	// stream (Config.Bus.Stream()).
	HeaderOriginalSequence = "Boxoffice-Original-Sequence"
	// HeaderEventID is the envelope's event_id, when the body decoded far
	// enough to have one.
	HeaderEventID = "Boxoffice-Event-Id"
)

// HandlerFunc applies the effect of one event in tx, the transaction that
// also records the event in the inbox: the effect commits exactly when the
// inbox row does, so of all the runs for one event id and consumer at most
// one commits. A run that rolled back may be followed by another, so the
// handler must have no effect outside tx (events to publish go to the
// outbox, in tx).
//
// Returning nil commits and acks. Returning an error wrapping ErrPermanent
// rolls back and dead-letters the message. Any other error, or a panic,
// rolls back and retries later with backoff. ctx outlives Run's context:
// it is canceled only when shutdown gives up waiting, and the handler must
// then return promptly.
type HandlerFunc func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error

// Consumer runs one durable JetStream pull consumer of the namespace's
// stream (Config.Bus.Stream(); bus.Stream by default).
type Consumer struct {
	pool    *pgxpool.Pool
	js      jetstream.JetStream
	cfg     Config
	handler HandlerFunc
	// external, set by NewExternal instead of handler, calls out before the
	// transaction and returns what to apply in it.
	external ExternalFunc
	// batch, set by NewBatch instead of handler, reads for a whole batch
	// before the transaction and returns what to apply in it.
	batch BatchFunc
	// calls holds a token for each external call in progress
	// (Config.CallConcurrency).
	calls   chan struct{}
	logger  *slog.Logger
	metrics *metrics
	policy  policy
	// afterCommitFunc, set only by tests, runs after a delivery's
	// transaction committed; returning true skips the ack, as a process
	// that died right after the commit would.
	afterCommitFunc func(ev outbox.Envelope, numDelivered uint64) (skipAck bool)
}

// New returns the consumer cfg describes, applying h to each event. It
// does not touch the server; Run provisions the durable consumer. Returns
// an error naming every invalid field of cfg.
func New(pool *pgxpool.Pool, js jetstream.JetStream, cfg Config, h HandlerFunc) (*Consumer, error) {
	if h == nil {
		return nil, errors.New("consumers.New: pool, js and handler are required")
	}
	return newConsumer(pool, js, cfg, h, nil, nil)
}

// newConsumer builds a consumer with exactly one of h, ext and batch.
func newConsumer(pool *pgxpool.Pool, js jetstream.JetStream, cfg Config, h HandlerFunc, ext ExternalFunc, batch BatchFunc) (*Consumer, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if pool == nil || js == nil {
		return nil, errors.New("consumers: pool and js are required")
	}
	return &Consumer{
		pool:     pool,
		js:       js,
		cfg:      cfg,
		handler:  h,
		external: ext,
		batch:    batch,
		calls:    make(chan struct{}, cfg.CallConcurrency),
		logger:   cfg.Logger.With("component", "consumer", "consumer", cfg.Name),
		metrics:  newMetrics(cfg.Registerer, cfg.Name),
		policy: policy{
			maxDeliver:  uint64(cfg.MaxDeliver),
			doubleAck:   cfg.DoubleAck,
			backoffFunc: jitteredBackoff(cfg.BackoffBase, cfg.BackoffMax),
		},
	}, nil
}

// Name is the consumer's durable name.
func (c *Consumer) Name() string { return c.cfg.Name }

// Timeouts of single operations on the server.
const (
	deadLetterTimeout = 10 * time.Second
	ackTimeout        = 10 * time.Second
	flushTimeout      = 5 * time.Second
	infoTimeout       = 5 * time.Second
	// pendingInterval is how often the pending gauge is refreshed.
	pendingInterval = 5 * time.Second
	// restartDelayMax caps the wait between attempts to consume again after
	// consuming stopped on its own.
	restartDelayMax = 30 * time.Second
)

// Run provisions the durable consumer (create or update, safe from every
// process at once) and handles messages until ctx is done. Then it drains:
// it stops pulling, lets the handlers in flight and those for the messages
// already buffered finish (Config.ShutdownTimeout at most; after that
// their contexts are canceled and their messages nakked for another
// process), acks them, flushes the acks and returns nil.
//
// Run survives NATS outages: consuming resumes when the connection comes
// back, and when consuming stops on its own (the durable consumer was
// deleted, say) Run provisions it again; the first provisioning is retried
// the same way. Returns an error only when the connection is closed for
// good.
func (c *Consumer) Run(ctx context.Context) error {
	cons, err := c.provision(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started: nothing to drain
		}
		// NATS is down or electing a leader: wait for it rather than take
		// the whole worker process down with this consumer.
		c.logger.WarnContext(ctx, "provision consumer; retrying", "error", err.Error())
		if cons, err = c.reprovision(ctx, 0); err != nil {
			return err
		}
		if cons == nil {
			return nil // stopped before it started
		}
	}
	var bg sync.WaitGroup
	defer bg.Wait()
	bgCtx, cancelBg := context.WithCancel(ctx)
	defer cancelBg()
	bg.Go(func() { c.refreshPending(bgCtx) })

	// Handlers run on a context that outlives ctx, so a shutdown lets them
	// finish; drain cancels it only when they overstay.
	handlerCtx, cancelHandlers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHandlers()
	inflight := newTracker()
	var returned atomic.Bool
	defer returned.Store(true)

	queue := make(chan jetstream.Msg, c.cfg.Concurrency*c.cfg.BatchSize)
	stopWorkers := make(chan struct{})
	var workers sync.WaitGroup
	for range c.cfg.Concurrency {
		workers.Go(func() { c.work(handlerCtx, inflight, queue, stopWorkers) })
	}
	// Runs before cancelHandlers: drain has seen every message settled.
	defer workers.Wait()
	defer close(stopWorkers)

	for restarts := 0; ; restarts++ {
		cc, err := cons.Consume(
			func(msg jetstream.Msg) { c.receive(handlerCtx, inflight, queue, msg) },
			jetstream.PullMaxMessages(c.cfg.Concurrency*c.cfg.BatchSize),
			jetstream.PullExpiry(bus.PullExpiry), jetstream.PullHeartbeat(bus.PullHeartbeat),
			jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
				if !returned.Load() {
					c.logConsumeError(ctx, err)
				}
			}),
		)
		if err != nil {
			if restarts == 0 {
				return fmt.Errorf("consume %s: %w", c.cfg.Name, err)
			}
			c.logger.ErrorContext(ctx, "consume failed", "error", err.Error())
		}
		if cc != nil {
			select {
			case <-ctx.Done():
				return c.drain(ctx, cc, inflight, cancelHandlers)
			case <-cc.Closed():
				c.logger.ErrorContext(ctx, "consuming stopped on its own; provisioning the consumer again")
			}
		}
		if cons, err = c.reprovision(ctx, restarts); err != nil {
			_ = c.drain(ctx, nil, inflight, cancelHandlers)
			return err
		}
		if cons == nil { // ctx is done
			return c.drain(ctx, nil, inflight, cancelHandlers)
		}
	}
}

// provision creates the durable consumer or updates it to match the
// config. The server is told to redeliver without limit: MaxDeliver is
// enforced here, so that a message whose dead letter cannot be stored yet
// is retried instead of dropped.
func (c *Consumer) provision(ctx context.Context) (jetstream.Consumer, error) {
	cc := jetstream.ConsumerConfig{
		Durable:       c.cfg.Name,
		Description:   "Boxoffice consumer " + c.cfg.Name,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: c.cfg.MaxAckPending,
	}
	filters := make([]string, len(c.cfg.FilterSubjects))
	for i, s := range c.cfg.FilterSubjects {
		filters[i] = c.cfg.Bus.Subject(s)
	}
	if len(filters) == 1 {
		cc.FilterSubject = filters[0]
	} else {
		cc.FilterSubjects = filters
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ProvisionTimeout)
	defer cancel()
	cons, err := c.js.CreateOrUpdateConsumer(ctx, c.cfg.Bus.Stream(), cc)
	if err != nil {
		return nil, fmt.Errorf("provision consumer %s: %w", c.cfg.Name, err)
	}
	return cons, nil
}

// reprovision provisions the consumer again after consuming stopped on its
// own, retrying with a growing delay. It returns nil, nil when ctx ends
// first, and an error when the connection is closed for good.
func (c *Consumer) reprovision(ctx context.Context, restarts int) (jetstream.Consumer, error) {
	// (restarts+1)s, doubling with each failed provisioning, up to
	// restartDelayMax.
	schedule := backoffpkg.Policy{Base: time.Duration(restarts+1) * time.Second, Max: restartDelayMax}
	for waits := 1; ; waits++ {
		delay := schedule.Delay(waits)
		if c.js.Conn().IsClosed() {
			return nil, fmt.Errorf("consume %s: %w", c.cfg.Name, nats.ErrConnectionClosed)
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(delay):
		}
		cons, err := c.provision(ctx)
		if err == nil {
			return cons, nil
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		c.logger.ErrorContext(ctx, "provision consumer", "error", err.Error(), "retry_in", schedule.Delay(waits+1).String())
	}
}

// drain stops pulling, waits for the buffered and in-flight messages, and
// flushes their acks. cc may be nil when consuming had already stopped.
func (c *Consumer) drain(ctx context.Context, cc jetstream.ConsumeContext, inflight *tracker, cancelHandlers context.CancelFunc) error {
	c.logger.InfoContext(ctx, "draining", "timeout", c.cfg.ShutdownTimeout.String())
	timeout := time.NewTimer(c.cfg.ShutdownTimeout)
	defer timeout.Stop()
	expired := false
	if cc != nil {
		// Drain delivers what is already buffered to the callback; Closed
		// closes after the last callback returned.
		cc.Drain()
		select {
		case <-cc.Closed():
		case <-timeout.C:
			expired = true
		}
	}
	idle := inflight.close()
	if !expired {
		select {
		case <-idle:
		case <-timeout.C:
			expired = true
		}
	}
	if expired {
		c.logger.WarnContext(ctx, "shutdown timeout: canceling in-flight handlers", "in_flight", inflight.count())
		cancelHandlers()
		if cc != nil {
			cc.Stop()
		}
		<-idle
	}
	// Acks are fire-and-forget publishes; make sure they left the process.
	if nc := c.js.Conn(); !nc.IsClosed() {
		if err := nc.FlushTimeout(flushTimeout); err != nil {
			c.logger.WarnContext(ctx, "flush acks", "error", err.Error())
		}
	}
	c.logger.InfoContext(ctx, "drained")
	return nil
}

// receive is the Consume callback. Callbacks of one ConsumeContext run one
// after another, so it only hands the message to the workers' queue: a
// slow or failing message never holds up the ones behind it.
func (c *Consumer) receive(ctx context.Context, inflight *tracker, queue chan<- jetstream.Msg, msg jetstream.Msg) {
	if !inflight.enter() {
		// Shutdown gave up waiting: release the message to another process.
		d := c.newDelivery(ctx, msg)
		c.settle(ctx, msg, d, outcome{kind: outcomeInterrupted, err: context.Canceled, numDelivered: d.numDelivered})
		return
	}
	select {
	case queue <- msg:
	case <-ctx.Done():
		d := c.newDelivery(ctx, msg)
		c.settle(ctx, msg, d, outcome{kind: outcomeInterrupted, err: ctx.Err(), numDelivered: d.numDelivered})
		inflight.leave()
	}
}

// work is one of Config.Concurrency workers: it takes the next message
// and whatever else is queued, up to Config.BatchSize, and handles them as
// one batch, until stop is closed.
func (c *Consumer) work(ctx context.Context, inflight *tracker, queue <-chan jetstream.Msg, stop <-chan struct{}) {
	batch := make([]jetstream.Msg, 0, c.cfg.BatchSize)
	for {
		select {
		case msg := <-queue:
			batch = append(batch[:0], msg)
		case <-stop:
			return
		}
	fill:
		for len(batch) < c.cfg.BatchSize {
			select {
			case msg := <-queue:
				batch = append(batch, msg)
			default:
				break fill
			}
		}
		c.handleBatch(ctx, batch)
		for range batch {
			inflight.leave()
		}
	}
}

// delivery is what is known about one delivery of a message.
//
// Every line logged about it carries what is known (log): the message
// id, the delivery's count and stream sequence, and the event's ids. They
// are kept as fields and made attributes only for a line the level
// writes: a logger.With per delivery would format them (slog's JSON
// handler formats With attributes at once) for every message, although
// the line of an applied message is at debug level (BenchmarkDeliveryLog).
type delivery struct {
	numDelivered uint64
	streamSeq    uint64
	hasMetadata  bool
	msgID        string
	// eventID and the event's other ids, set by setEvent.
	eventID                    uuid.UUID
	eventType                  string
	orderID                    uuid.UUID
	correlationID, causationID string
	// logger is the consumer's.
	logger *slog.Logger
}

// newDelivery reads a delivery's metadata and counts it.
func (c *Consumer) newDelivery(ctx context.Context, msg jetstream.Msg) *delivery {
	d := &delivery{numDelivered: 1, logger: c.logger, msgID: msg.Headers().Get(jetstream.MsgIDHeader)}
	if md, err := msg.Metadata(); err != nil {
		d.log(ctx, slog.LevelWarn, "message has no jetstream metadata", slog.String("error", err.Error()))
	} else {
		d.numDelivered, d.streamSeq, d.hasMetadata = md.NumDelivered, md.Sequence.Stream, true
	}
	c.metrics.delivered.Inc()
	if d.numDelivered > 1 {
		c.metrics.redelivered.Inc()
	}
	return d
}

// setEvent adds what the delivery's event says to its log lines; an
// envelope that did not decode to an event id adds nothing.
func (d *delivery) setEvent(ev outbox.Envelope) {
	if ev.EventID == uuid.Nil {
		return
	}
	d.eventID, d.eventType, d.orderID, d.correlationID, d.causationID = ev.EventID, ev.EventType, ev.AggregateID, ev.CorrelationID, ev.CausationID
}

// deliveryAttrs is how many attributes log adds at most.
const deliveryAttrs = 8

// log writes a line about the delivery at level, when the level writes
// it, with the delivery's attributes (in the order they became known)
// before attrs.
func (d *delivery) log(ctx context.Context, level slog.Level, msg string, attrs ...slog.Attr) {
	if !d.logger.Enabled(ctx, level) {
		return
	}
	all := make([]slog.Attr, 0, deliveryAttrs+len(attrs))
	if d.msgID != "" {
		all = append(all, slog.String("msg_id", d.msgID))
	}
	if d.hasMetadata {
		all = append(all, slog.Uint64("num_delivered", d.numDelivered), slog.Uint64("stream_seq", d.streamSeq))
	}
	if d.eventID != uuid.Nil {
		all = append(all, slog.Any("event_id", d.eventID), slog.String("event_type", d.eventType),
			slog.Any("order_id", d.orderID), slog.String("correlation_id", d.correlationID),
			slog.String("causation_id", d.causationID))
	}
	d.logger.LogAttrs(ctx, level, msg, append(all, attrs...)...)
}

// keepAlive tells the server the batch's messages are still being worked
// on every AckWait/3 until stop is called, so a long batch does not get its
// messages redelivered to another process. stop returns once no more
// progress acks can be sent.
//
// It is a timer, not a goroutine: almost every batch ends long before
// its first progress ack, and a goroutine started and stopped per batch
// cost a spawn and a wake-up for nothing.
func (c *Consumer) keepAlive(ctx context.Context, items []*item) (stop func()) {
	// The keep-alive ends when stop is called, not with ctx: a batch
	// that finishes during shutdown still keeps its messages.
	ctx = context.WithoutCancel(ctx)
	every := c.cfg.AckWait / 3
	k := &keepAlive{}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.timer = time.AfterFunc(every, func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.stopped {
			return
		}
		for _, it := range items {
			if err := it.msg.InProgress(); err != nil {
				it.d.log(ctx, slog.LevelWarn, "extend ack deadline", slog.String("error", err.Error()))
			}
		}
		k.timer.Reset(every)
	})
	return k.stop
}

// keepAlive is one batch's keep-alive: its timer, and whether it was
// stopped, under mu, which a progress ack holds while it is sent.
type keepAlive struct {
	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// stop ends the keep-alive; once it returns, no more progress acks are
// sent (one being sent is waited for).
func (k *keepAlive) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	k.timer.Stop()
}

// settle carries out decide's answer for o.
func (c *Consumer) settle(ctx context.Context, msg jetstream.Msg, d *delivery, o outcome) {
	a := decide(o, c.policy)
	c.logOutcome(ctx, d, o, a)
	switch a.kind {
	case actionAck:
		c.ack(ctx, d, msg.Ack())
	case actionDoubleAck:
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackTimeout)
		defer cancel()
		c.ack(ctx, d, msg.DoubleAck(actx))
	case actionNak:
		if err := msg.NakWithDelay(a.delay); err != nil {
			d.log(ctx, slog.LevelWarn, "nak failed; the message comes back after AckWait", slog.String("error", err.Error()))
		}
	case actionDeadLetter:
		if err := c.deadLetter(ctx, msg, d, a.reason); err != nil {
			c.settle(ctx, msg, d, outcome{kind: outcomeDeadLetterFailed, err: err, numDelivered: d.numDelivered})
			return
		}
		c.metrics.deadLettered.Inc()
		d.log(ctx, slog.LevelError, "dead-lettered message", outcomeAttr(o), actionAttr(a), slog.String("reason", a.reason))
		if err := msg.TermWithReason(a.reason); err != nil {
			d.log(ctx, slog.LevelWarn, "terminate dead-lettered message; it will be dead-lettered again (deduplicated)", slog.String("error", err.Error()))
		}
	}
}

func (c *Consumer) ack(ctx context.Context, d *delivery, err error) {
	if err != nil {
		d.log(ctx, slog.LevelWarn, "ack failed; the redelivery will be an inbox no-op", slog.String("error", err.Error()))
		return
	}
	c.metrics.acked.Inc()
}

// deadLetter stores the message on the dead-letter stream and returns once
// the server confirmed it. Its Nats-Msg-Id makes a repeat a no-op.
func (c *Consumer) deadLetter(ctx context.Context, msg jetstream.Msg, d *delivery, reason string) error {
	h := nats.Header{}
	for k, vs := range msg.Headers() {
		// Nats-* headers (message id, expectations) belong to the original
		// publish; copied, they would dedupe or fail this one.
		if !strings.HasPrefix(k, "Nats-") {
			h[k] = slices.Clone(vs)
		}
	}
	h.Set(HeaderConsumer, c.cfg.Name)
	h.Set(HeaderReason, reason)
	h.Set(HeaderNumDelivered, strconv.FormatUint(d.numDelivered, 10))
	h.Set(HeaderOriginalSubject, msg.Subject())
	opts := []jetstream.PublishOpt{jetstream.WithExpectStream(c.cfg.Bus.DLQStream())}
	if d.streamSeq != 0 {
		h.Set(HeaderOriginalSequence, strconv.FormatUint(d.streamSeq, 10))
		opts = append(opts, jetstream.WithMsgID(c.cfg.Name+":"+strconv.FormatUint(d.streamSeq, 10)))
	}
	if d.eventID != uuid.Nil {
		h.Set(HeaderEventID, d.eventID.String())
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deadLetterTimeout)
	defer cancel()
	dl := &nats.Msg{Subject: c.cfg.Bus.DLQSubjectPrefix() + c.cfg.Name, Data: msg.Data(), Header: h}
	if _, err := c.js.PublishMsg(ctx, dl, opts...); err != nil {
		return fmt.Errorf("publish dead letter: %w", err)
	}
	return nil
}

func outcomeAttr(o outcome) slog.Attr { return slog.String("outcome", o.kind.String()) }

func actionAttr(a action) slog.Attr { return slog.String("action", a.kind.String()) }

// logOutcome writes the line a delivery's outcome deserves; a dead letter
// is logged once stored, by settle. Message bodies are never logged.
func (c *Consumer) logOutcome(ctx context.Context, d *delivery, o outcome, a action) {
	var pe *panicError
	if errors.As(o.err, &pe) {
		d.log(ctx, slog.LevelError, "handler panicked", outcomeAttr(o), actionAttr(a),
			slog.String("panic", fmt.Sprint(pe.value)), slog.String("stack", string(pe.stack)))
	}
	line := func(level slog.Level, msg string, attrs ...slog.Attr) {
		d.log(ctx, level, msg, append([]slog.Attr{outcomeAttr(o), actionAttr(a)}, attrs...)...)
	}
	switch {
	case a.kind == actionDeadLetter:
	case o.kind == outcomeApplied:
		line(slog.LevelDebug, "event applied")
	case o.kind == outcomeDuplicate:
		line(slog.LevelInfo, "event already applied; acking without running the handler")
	case o.kind == outcomeNoEffect:
		line(slog.LevelDebug, "event has nothing to apply; acking without a transaction")
	case o.kind == outcomeInterrupted:
		line(slog.LevelInfo, "handler interrupted by shutdown; releasing the message")
	case o.kind == outcomeDeadLetterFailed:
		line(slog.LevelError, "could not store dead letter; retrying later", slog.String("error", o.err.Error()), slog.String("retry_in", a.delay.String()))
	case errors.Is(o.err, context.Canceled):
		line(slog.LevelInfo, "handler canceled; retrying later", slog.String("error", o.err.Error()), slog.String("retry_in", a.delay.String()))
	default:
		line(slog.LevelWarn, "handler failed; retrying later", slog.String("error", errText(o.err)), slog.String("retry_in", a.delay.String()))
	}
}

// logConsumeError logs an error JetStream reported while pulling: missing
// heartbeats and the like are warnings, a deleted consumer an error.
func (c *Consumer) logConsumeError(ctx context.Context, err error) {
	switch {
	case errors.Is(err, context.Canceled):
	case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrBadRequest):
		c.logger.ErrorContext(ctx, "consume", "error", err.Error())
	default:
		c.logger.WarnContext(ctx, "consume", "error", err.Error())
	}
}

// refreshPending keeps the pending gauge current until ctx is done.
func (c *Consumer) refreshPending(ctx context.Context) {
	backoffpkg.Every(ctx, pendingInterval, func(ctx context.Context) {
		ictx, cancel := context.WithTimeout(ctx, infoTimeout)
		cons, err := c.js.Consumer(ictx, c.cfg.Bus.Stream(), c.cfg.Name)
		cancel()
		switch {
		case err == nil:
			info := cons.CachedInfo()
			c.metrics.pending.Set(float64(info.NumPending) + float64(info.NumAckPending))
		case ctx.Err() == nil:
			c.logger.DebugContext(ctx, "refresh pending gauge", "error", err.Error())
		}
	})
}

// tracker counts the messages handed to workers and tells when the last
// one is done after close.
type tracker struct {
	mu     sync.Mutex
	active int
	closed bool
	idle   chan struct{}
}

func newTracker() *tracker {
	return &tracker{idle: make(chan struct{})}
}

// enter counts one more message, or returns false after close.
func (t *tracker) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.active++
	return true
}

// leave counts one message done.
func (t *tracker) leave() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.active--
	if t.closed && t.active == 0 {
		close(t.idle)
	}
}

// close refuses further messages and returns a channel closed once the
// counted ones are done.
func (t *tracker) close() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.closed = true
		if t.active == 0 {
			close(t.idle)
		}
	}
	return t.idle
}

func (t *tracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.active
}
