package consumers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
	"boxoffice/platform/outbox"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/natstest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// waitFor bounds every require.Eventually of these tests.
const waitFor = 20 * time.Second

// testBundle is what a consumer test works with: its own database (with an
// effects table the handlers write to), its own JetStream server, and a
// metrics registry.
type testBundle struct {
	pool *pgxpool.Pool
	nats *natstest.Server
	js   jetstream.JetStream
	reg  *prometheus.Registry
	logs *testkit.Log
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{logs: testkit.NewLog(t), pool: dbtest.New(t), nats: natstest.New(t), reg: prometheus.NewRegistry()}
	_, b.js = b.nats.Connect(t)
	dbtest.Exec(t, b.pool, `CREATE TABLE effects (event_id uuid NOT NULL, consumer text NOT NULL)`)
	return b
}

// newConsumer builds a consumer with test-friendly defaults: a name, the
// test's logger and registry, and millisecond backoff.
func (b *testBundle) newConsumer(t *testing.T, cfg Config, h HandlerFunc) *Consumer {
	t.Helper()
	cfg.Name = cmp.Or(cfg.Name, "test")
	cfg.BackoffBase = cmp.Or(cfg.BackoffBase, time.Millisecond)
	cfg.BackoffMax = cmp.Or(cfg.BackoffMax, 100*time.Millisecond)
	if cfg.Logger == nil {
		cfg.Logger = b.logs.Logger
	}
	if cfg.Registerer == nil {
		cfg.Registerer = b.reg
	}
	c, err := New(b.pool, b.js, cfg, h)
	require.NoError(t, err)
	return c
}

// run starts c.Run and returns a function that stops it and returns its
// error. The test's cleanup stops it too, before the server and database
// go away.
func run(t *testing.T, c *Consumer) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(waitFor + time.Minute):
				err = errors.New("Run did not return")
			}
		})
		return err
	}
	t.Cleanup(func() { require.NoError(t, stop()) })
	return stop
}

// effectHandler records each event it applies in effects and counts its
// calls.
func effectHandler(calls *atomic.Int64) HandlerFunc {
	return func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
		calls.Add(1)
		return insertEffect(ctx, tx, ev)
	}
}

func insertEffect(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
	_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, consumer) VALUES ($1, 'test')`, ev.EventID)
	return err
}

// testEvent is a fresh TestEvent envelope and its JSON.
func testEvent(t *testing.T) (outbox.Envelope, []byte) {
	t.Helper()
	ev, raw, err := outbox.NewOrderEvent("TestEvent", uuid.New(), time.Now(), "corr-"+uuid.NewString(), "cause-"+uuid.NewString(),
		map[string]string{"secret_marker": "do-not-log-me"})
	require.NoError(t, err)
	return ev, raw
}

// publish stores data on ticketing.order.TestEvent with msgID and returns
// its stream sequence.
func (b *testBundle) publish(t *testing.T, msgID string, data []byte) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	ack, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: "ticketing.order.TestEvent", Data: data}, jetstream.WithMsgID(msgID))
	require.NoError(t, err)
	require.False(t, ack.Duplicate)
	return ack.Sequence
}

func (b *testBundle) publishEvent(t *testing.T, ev outbox.Envelope, raw []byte) uint64 {
	t.Helper()
	return b.publish(t, ev.EventID.String(), raw)
}

func (b *testBundle) info(t *testing.T, name string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cons, err := b.js.Consumer(ctx, bus.Stream, name)
	require.NoError(t, err)
	return cons.CachedInfo()
}

// waitSettled waits until every message up to stream sequence seq was
// acked or terminated and none is pending.
func (b *testBundle) waitSettled(t *testing.T, name string, seq uint64) {
	t.Helper()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		cons, err := b.js.Consumer(ctx, bus.Stream, name) // not found until Run provisioned it
		if err != nil {
			return false
		}
		info := cons.CachedInfo()
		return info.AckFloor.Stream >= seq && info.NumAckPending == 0 && info.NumPending == 0
	}, waitFor, 10*time.Millisecond)
}

// deadLetters returns the messages on the dead-letter stream.
func (b *testBundle) deadLetters(t *testing.T) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	s, err := b.js.Stream(ctx, bus.DLQStream)
	require.NoError(t, err)
	var out []*jetstream.RawStreamMsg
	for seq := s.CachedInfo().State.FirstSeq; seq != 0 && seq <= s.CachedInfo().State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		out = append(out, m)
	}
	return out
}

func (b *testBundle) waitDeadLetters(t *testing.T, n int) []*jetstream.RawStreamMsg {
	t.Helper()
	var dls []*jetstream.RawStreamMsg
	require.Eventually(t, func() bool {
		dls = b.deadLetters(t)
		return len(dls) >= n
	}, waitFor, 10*time.Millisecond)
	require.Len(t, dls, n)
	return dls
}

func (b *testBundle) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	return dbtest.Count(t, b.pool, sql, args...)
}

// metric returns the value of a counter or gauge of consumer name.
func (b *testBundle) metric(t *testing.T, metric, name string) float64 {
	t.Helper()
	families, err := b.reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" && l.GetValue() == name {
					if m.GetCounter() != nil {
						return m.GetCounter().GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

func TestConsumer(t *testing.T) {
	t.Parallel()

	t.Run("RedeliveryAfterCommitIsInboxNoOp", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls, crashes atomic.Int64
		c := b.newConsumer(t, Config{AckWait: time.Second}, effectHandler(&calls))
		// The process "dies" between the commit and the ack of the first
		// delivery: no ack is sent, so JetStream redelivers after AckWait.
		c.afterCommitFunc = func(_ outbox.Envelope, numDelivered uint64) bool {
			if numDelivered == 1 {
				crashes.Add(1)
				return true
			}
			return false
		}
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		run(t, c)

		b.waitSettled(t, "test", seq)
		info := b.info(t, "test")
		require.Equal(t, uint64(2), info.Delivered.Consumer, "delivered twice")
		require.Equal(t, int64(1), crashes.Load())
		require.Equal(t, int64(1), calls.Load(), "the redelivery skipped the handler")
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, ev.EventID))
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM inbox WHERE consumer = 'test' AND event_id = $1`, ev.EventID))
		require.Equal(t, float64(2), b.metric(t, "boxoffice_consumer_delivered_total", "test"))
		require.Equal(t, float64(1), b.metric(t, "boxoffice_consumer_redelivered_total", "test"))
		require.Equal(t, float64(1), b.metric(t, "boxoffice_consumer_acked_total", "test"))
		require.Empty(t, b.deadLetters(t))
	})

	// An event whose writer applied it for this consumer (AppliedBy) is
	// acked with no handler call, no transaction and no inbox row; one
	// applied for another consumer is applied as any event.
	t.Run("AppliedByItsWriterIsAckedWithoutEffect", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int64
		c := b.newConsumer(t, Config{}, effectHandler(&calls))
		mine, _ := testEvent(t)
		mine.AppliedBy = "test"
		mineRaw, err := json.Marshal(mine)
		require.NoError(t, err)
		theirs, _ := testEvent(t)
		theirs.AppliedBy = "someone_else"
		theirsRaw, err := json.Marshal(theirs)
		require.NoError(t, err)
		b.publishEvent(t, mine, mineRaw)
		seq := b.publishEvent(t, theirs, theirsRaw)
		run(t, c)

		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(1), calls.Load(), "only the other consumer's")
		require.Zero(t, b.count(t, `SELECT count(*) FROM inbox WHERE event_id = $1`, mine.EventID))
		require.Zero(t, b.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, mine.EventID))
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, theirs.EventID))
		require.Empty(t, b.deadLetters(t))
	})

	t.Run("RetriesWithGrowingBackoffThenDeadLetters", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const maxDeliver = 5
		const base = 5 * time.Millisecond
		poison, poisonRaw := testEvent(t)
		var mu sync.Mutex
		var attempts []time.Time
		c := b.newConsumer(t, Config{MaxDeliver: maxDeliver, BackoffBase: base, BackoffMax: time.Minute},
			func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
				if ev.EventID == poison.EventID {
					mu.Lock()
					defer mu.Unlock()
					attempts = append(attempts, time.Now())
					return errors.New("payment provider unavailable")
				}
				return insertEffect(ctx, tx, ev)
			})
		poisonSeq := b.publishEvent(t, poison, poisonRaw)
		var lastSeq uint64
		for range 5 {
			ev, raw := testEvent(t)
			lastSeq = b.publishEvent(t, ev, raw)
		}
		run(t, c)

		// The messages behind the poison one flow while it is retried: they
		// are all applied before it is dead-lettered (which takes at least
		// 5+80+405+1280 ms of backoff).
		require.Eventually(t, func() bool { return b.count(t, `SELECT count(*) FROM effects`) == 5 }, waitFor, 5*time.Millisecond)
		require.Empty(t, b.deadLetters(t), "the poison message is still being retried")

		dl := b.waitDeadLetters(t, 1)[0]
		b.waitSettled(t, "test", lastSeq)
		require.Equal(t, bus.DLQSubjectPrefix+"test", dl.Subject)
		require.Equal(t, poisonRaw, dl.Data, "the original body")
		require.Equal(t, "test", dl.Header.Get(HeaderConsumer))
		require.Equal(t, "gave up after 5 deliveries: payment provider unavailable", dl.Header.Get(HeaderReason))
		require.Equal(t, "5", dl.Header.Get(HeaderNumDelivered))
		require.Equal(t, "ticketing.order.TestEvent", dl.Header.Get(HeaderOriginalSubject))
		require.Equal(t, fmt.Sprint(poisonSeq), dl.Header.Get(HeaderOriginalSequence))
		require.Equal(t, poison.EventID.String(), dl.Header.Get(HeaderEventID))
		require.Equal(t, fmt.Sprintf("test:%d", poisonSeq), dl.Header.Get(jetstream.MsgIDHeader))

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, attempts, maxDeliver)
		// Each gap is at least its backoff less the jitter, and those floors
		// grow. (Comparing the gaps themselves would fail on a loaded
		// machine, where any delivery can come late; none can come early.)
		var prevFloor time.Duration
		for i := 1; i < len(attempts); i++ {
			gap := attempts[i].Sub(attempts[i-1])
			floor := time.Duration(float64(backoff(uint64(i), base, time.Minute, -0.1)))
			require.GreaterOrEqual(t, gap, floor, "gap %d", i)
			require.Greater(t, floor, prevFloor, "backoff %d grows", i)
			prevFloor = floor
		}
		require.Zero(t, b.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, poison.EventID))
		require.Zero(t, b.count(t, `SELECT count(*) FROM inbox WHERE event_id = $1`, poison.EventID))
		require.Equal(t, float64(1), b.metric(t, "boxoffice_consumer_dead_lettered_total", "test"))
	})

	t.Run("DeadLettersInvalidEnvelopesAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int64
		c := b.newConsumer(t, Config{}, effectHandler(&calls))
		partial, err := json.Marshal(map[string]any{
			"event_id": uuid.New(), "event_type": "TestEvent", "schema_version": 1, "aggregate_type": "order",
		})
		require.NoError(t, err)
		bodies := []struct {
			data    []byte
			reason  string
			eventID bool
		}{
			{[]byte(`not json {`), "invalid envelope: not JSON", false},
			{[]byte(`{"event_type":"TestEvent","schema_version":1,"aggregate_type":"order"}`), "invalid envelope: missing event_id", false},
			{partial, "invalid envelope: missing aggregate_id", true},
		}
		var lastSeq uint64
		for i, body := range bodies {
			lastSeq = b.publish(t, fmt.Sprintf("bad-%d", i), body.data)
		}
		run(t, c)

		dls := b.waitDeadLetters(t, len(bodies))
		b.waitSettled(t, "test", lastSeq)
		byReason := map[string]*jetstream.RawStreamMsg{}
		for _, dl := range dls {
			byReason[dl.Header.Get(HeaderReason)] = dl
		}
		for _, body := range bodies {
			dl := byReason[body.reason]
			require.NotNil(t, dl, body.reason)
			require.Equal(t, body.data, dl.Data)
			require.Equal(t, "1", dl.Header.Get(HeaderNumDelivered), "dead-lettered on the first delivery")
			require.Equal(t, body.eventID, dl.Header.Get(HeaderEventID) != "", "event id header when decodable")
		}
		require.Zero(t, calls.Load())
		require.Zero(t, b.count(t, `SELECT count(*) FROM effects`))
		require.Zero(t, b.count(t, `SELECT count(*) FROM inbox`))
		require.Equal(t, uint64(len(bodies)), b.info(t, "test").Delivered.Consumer, "no redelivery")
	})

	t.Run("PermanentErrorDeadLettersAndRollsBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int64
		c := b.newConsumer(t, Config{}, func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
			calls.Add(1)
			if err := insertEffect(ctx, tx, ev); err != nil {
				return err
			}
			return Permanent(errors.New("seat is not in this event"))
		})
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		run(t, c)

		dl := b.waitDeadLetters(t, 1)[0]
		b.waitSettled(t, "test", seq)
		require.Equal(t, "permanent failure: seat is not in this event", dl.Header.Get(HeaderReason))
		require.Equal(t, "1", dl.Header.Get(HeaderNumDelivered))
		require.Equal(t, ev.EventID.String(), dl.Header.Get(HeaderEventID))
		require.Equal(t, int64(1), calls.Load())
		require.Zero(t, b.count(t, `SELECT count(*) FROM effects`), "the effect was rolled back")
		require.Zero(t, b.count(t, `SELECT count(*) FROM inbox`), "the inbox row was rolled back")
	})

	t.Run("SameEventIDTwiceInTheStreamAppliesOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int64
		c := b.newConsumer(t, Config{}, effectHandler(&calls))
		ev, raw := testEvent(t)
		b.publish(t, "republish-1", raw)
		seq := b.publish(t, "republish-2", raw)
		require.Equal(t, uint64(2), seq, "the stream holds the event twice")
		run(t, c)

		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(1), calls.Load())
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, ev.EventID))
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM inbox WHERE event_id = $1`, ev.EventID))
		require.Equal(t, float64(2), b.metric(t, "boxoffice_consumer_acked_total", "test"))
	})

	t.Run("ShutdownWaitsForInFlightHandlerAndAcks", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		slow, slowRaw := testEvent(t)
		started, release := make(chan struct{}), make(chan struct{})
		var slowCalls, otherCalls atomic.Int64
		var finished atomic.Bool
		h := func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
			if ev.EventID != slow.EventID {
				otherCalls.Add(1)
				return insertEffect(ctx, tx, ev)
			}
			if slowCalls.Add(1) == 1 {
				close(started)
				<-release
			}
			if err := insertEffect(ctx, tx, ev); err != nil {
				return err
			}
			finished.Store(true)
			return nil
		}
		seq := b.publishEvent(t, slow, slowRaw)
		stop := run(t, b.newConsumer(t, Config{}, h))
		select {
		case <-started:
		case <-time.After(waitFor):
			t.Fatal("the handler did not start")
		}
		stopped := make(chan error, 1)
		go func() { stopped <- stop() }()
		select {
		case <-stopped:
			t.Fatal("Run returned while a handler was running")
		case <-time.After(100 * time.Millisecond):
		}
		close(release)
		select {
		case err := <-stopped:
			require.NoError(t, err)
		case <-time.After(waitFor):
			t.Fatal("Run did not return after the handler finished")
		}
		require.True(t, finished.Load(), "Run returned after the handler finished")
		b.waitSettled(t, "test", seq)
		require.Equal(t, seq, b.info(t, "test").AckFloor.Stream, "acked, not nakked")

		// A new instance of the same durable consumer gets the next message,
		// not the one that was acked during shutdown.
		next, nextRaw := testEvent(t)
		nextSeq := b.publishEvent(t, next, nextRaw)
		run(t, b.newConsumer(t, Config{}, h))
		b.waitSettled(t, "test", nextSeq)
		require.Equal(t, int64(1), slowCalls.Load())
		require.Equal(t, int64(1), otherCalls.Load())
		require.Equal(t, uint64(2), b.info(t, "test").Delivered.Consumer, "nothing was redelivered")
		require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM effects`))
	})

	t.Run("ShutdownTimeoutCancelsHandlerAndReleasesMessage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		started := make(chan struct{})
		var calls atomic.Int64
		h := func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
			if calls.Add(1) == 1 {
				if err := insertEffect(ctx, tx, ev); err != nil {
					return err
				}
				close(started)
				<-ctx.Done() // overstays until shutdown gives up on it
				return ctx.Err()
			}
			return insertEffect(ctx, tx, ev)
		}
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		stop := run(t, b.newConsumer(t, Config{ShutdownTimeout: 200 * time.Millisecond, AckWait: time.Minute}, h))
		select {
		case <-started:
		case <-time.After(waitFor):
			t.Fatal("the handler did not start")
		}
		require.NoError(t, stop())
		require.Zero(t, b.count(t, `SELECT count(*) FROM effects`), "the canceled handler rolled back")
		require.Zero(t, b.count(t, `SELECT count(*) FROM inbox`))

		// The message was nakked, not left to AckWait (a minute): the next
		// instance gets it at once.
		run(t, b.newConsumer(t, Config{AckWait: time.Minute}, h))
		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(2), calls.Load())
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effects`))
	})

	t.Run("RecoversPanicAsTransient", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int64
		c := b.newConsumer(t, Config{}, func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
			if calls.Add(1) == 1 {
				if err := insertEffect(ctx, tx, ev); err != nil {
					return err
				}
				panic("nil map somewhere")
			}
			return insertEffect(ctx, tx, ev)
		})
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		run(t, c)

		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(2), calls.Load())
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effects`), "the panicking attempt rolled back")
		require.Empty(t, b.deadLetters(t))
		var panicked bool
		for _, l := range b.logs.Lines(t) {
			if l["msg"] == "handler panicked" {
				panicked = true
				require.Equal(t, "nil map somewhere", l["panic"])
				require.Equal(t, ev.EventID.String(), l["event_id"])
			}
		}
		require.True(t, panicked, "the panic was logged")
	})

	t.Run("KeepsLongHandlersAlive", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const ackWait = 300 * time.Millisecond
		var calls atomic.Int64
		c := b.newConsumer(t, Config{AckWait: ackWait}, func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
			calls.Add(1)
			select { // work for several AckWaits
			case <-time.After(4 * ackWait):
			case <-ctx.Done():
				return ctx.Err()
			}
			return insertEffect(ctx, tx, ev)
		})
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		run(t, c)

		b.waitSettled(t, "test", seq)
		info := b.info(t, "test")
		require.Equal(t, uint64(1), info.Delivered.Consumer, "never redelivered while the handler ran")
		require.Equal(t, int64(1), calls.Load())
		require.Equal(t, float64(0), b.metric(t, "boxoffice_consumer_redelivered_total", "test"))
	})

	t.Run("RetriesDeadLetterUntilStored", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		require.NoError(t, b.js.DeleteStream(ctx, bus.DLQStream))
		c := b.newConsumer(t, Config{BackoffMax: 50 * time.Millisecond}, func(context.Context, pgx.Tx, outbox.Envelope) error {
			return nil
		})
		seq := b.publish(t, "bad", []byte(`not json {`))
		run(t, c)

		// The dead letter cannot be stored: the message is nakked, not lost.
		require.Eventually(t, func() bool {
			return b.metric(t, "boxoffice_consumer_redelivered_total", "test") >= 2
		}, waitFor, 10*time.Millisecond)
		require.Equal(t, float64(0), b.metric(t, "boxoffice_consumer_dead_lettered_total", "test"))

		require.NoError(t, bus.Provision(ctx, b.js, bus.Config{}))
		dl := b.waitDeadLetters(t, 1)[0]
		b.waitSettled(t, "test", seq)
		require.Equal(t, "invalid envelope: not JSON", dl.Header.Get(HeaderReason))
		require.NotEqual(t, "1", dl.Header.Get(HeaderNumDelivered))
	})

	t.Run("ExhaustedMessageIsNotHandledAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		require.NoError(t, b.js.DeleteStream(ctx, bus.DLQStream))
		var calls atomic.Int64
		c := b.newConsumer(t, Config{MaxDeliver: 1, BackoffMax: 20 * time.Millisecond}, func(context.Context, pgx.Tx, outbox.Envelope) error {
			calls.Add(1)
			return errors.New("still broken")
		})
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		run(t, c)

		// Delivery 1 fails and cannot be dead-lettered; the deliveries after
		// it find the message exhausted and do not run the handler again.
		require.Eventually(t, func() bool {
			return b.metric(t, "boxoffice_consumer_redelivered_total", "test") >= 2
		}, waitFor, 10*time.Millisecond)
		require.NoError(t, bus.Provision(ctx, b.js, bus.Config{}))
		dl := b.waitDeadLetters(t, 1)[0]
		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(1), calls.Load())
		require.Equal(t, "gave up after 1 deliveries", dl.Header.Get(HeaderReason))
		require.Zero(t, b.count(t, `SELECT count(*) FROM inbox`))
	})

	t.Run("ReportsPendingMessages", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		release := make(chan struct{})
		var calls atomic.Int64
		c := b.newConsumer(t, Config{Concurrency: 1}, func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
			calls.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			return insertEffect(ctx, tx, ev)
		})
		var seq uint64
		for range 4 {
			ev, raw := testEvent(t)
			seq = b.publishEvent(t, ev, raw)
		}
		run(t, c)
		require.Eventually(t, func() bool {
			return b.metric(t, "boxoffice_consumer_pending", "test") == 4
		}, waitFor, 10*time.Millisecond)
		close(release)
		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(4), calls.Load())
		require.Eventually(t, func() bool {
			return b.metric(t, "boxoffice_consumer_pending", "test") == 0
		}, waitFor, 10*time.Millisecond)
	})

	t.Run("SurvivesNATSRestart", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int64
		c := b.newConsumer(t, Config{}, effectHandler(&calls))
		run(t, c)
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		b.waitSettled(t, "test", seq)

		b.nats.Stop()
		b.nats.Start(t)

		next, nextRaw := testEvent(t)
		var nextSeq uint64
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			ack, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: next.Subject(), Data: nextRaw}, jetstream.WithMsgID(next.EventID.String()))
			if err != nil {
				return false
			}
			nextSeq = ack.Sequence
			return true
		}, waitFor, 50*time.Millisecond)
		b.waitSettled(t, "test", nextSeq)
		require.Equal(t, int64(2), calls.Load())
		require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM effects`))
	})

	t.Run("StartsWhileNATSIsDownAndWaitsForIt", func(t *testing.T) {
		// A worker restarted during a NATS outage or leader election must
		// wait for the bus, not exit (the stack test saw a worker die so).
		t.Parallel()
		b := setup(t)
		b.nats.Stop()
		var calls atomic.Int64
		stop := run(t, b.newConsumer(t, Config{ProvisionTimeout: 500 * time.Millisecond}, effectHandler(&calls)))
		time.Sleep(3 * time.Second) // the first attempts time out
		b.nats.Start(t)
		ev, raw := testEvent(t)
		var seq uint64
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			ack, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: ev.Subject(), Data: raw}, jetstream.WithMsgID(ev.EventID.String()))
			if err != nil {
				return false
			}
			seq = ack.Sequence
			return true
		}, waitFor, 50*time.Millisecond)
		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(1), calls.Load())
		require.NoError(t, stop())
	})

	t.Run("ProvisionsTheConsumerAgainWhenDeleted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int64
		run(t, b.newConsumer(t, Config{}, effectHandler(&calls)))
		ev, raw := testEvent(t)
		b.waitSettled(t, "test", b.publishEvent(t, ev, raw))

		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		require.NoError(t, b.js.DeleteConsumer(ctx, bus.Stream, "test"))
		next, nextRaw := testEvent(t)
		b.publishEvent(t, next, nextRaw)
		// The new durable consumer starts from the beginning of the stream;
		// the inbox makes the replayed first event a no-op.
		require.Eventually(t, func() bool {
			return b.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, next.EventID) == 1
		}, waitFor, 10*time.Millisecond)
		require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM effects`))
	})

	t.Run("ConsumersShareARegistryAndKeepTheirOwnInbox", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var alphaCalls, betaCalls atomic.Int64
		alpha := b.newConsumer(t, Config{Name: "alpha"}, effectHandler(&alphaCalls))
		beta := b.newConsumer(t, Config{Name: "beta", DoubleAck: true}, effectHandler(&betaCalls))
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		run(t, alpha)
		run(t, beta)

		b.waitSettled(t, "alpha", seq)
		b.waitSettled(t, "beta", seq)
		require.Equal(t, int64(1), alphaCalls.Load())
		require.Equal(t, int64(1), betaCalls.Load())
		require.Equal(t, int64(2), b.count(t, `SELECT count(*) FROM inbox WHERE event_id = $1`, ev.EventID))
		require.Equal(t, float64(1), b.metric(t, "boxoffice_consumer_acked_total", "alpha"))
		require.Equal(t, float64(1), b.metric(t, "boxoffice_consumer_acked_total", "beta"))
	})

	t.Run("LogsIdentifyTheEventButNeverTheBody", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int64
		c := b.newConsumer(t, Config{}, func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
			if calls.Add(1) == 1 {
				return errors.New("order row locked elsewhere")
			}
			return insertEffect(ctx, tx, ev)
		})
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		run(t, c)
		b.waitSettled(t, "test", seq)

		var retried bool
		for _, l := range b.logs.Lines(t) {
			require.NotContains(t, fmt.Sprint(l), "do-not-log-me")
			if l["msg"] != "handler failed; retrying later" {
				continue
			}
			retried = true
			require.Equal(t, "WARN", l["level"])
			require.Equal(t, "test", l["consumer"])
			require.Equal(t, ev.EventID.String(), l["event_id"])
			require.Equal(t, ev.AggregateID.String(), l["order_id"])
			require.Equal(t, ev.CorrelationID, l["correlation_id"])
			require.Equal(t, ev.CausationID, l["causation_id"])
			require.Equal(t, float64(1), l["num_delivered"])
			require.Equal(t, "order row locked elsewhere", l["error"])
		}
		require.True(t, retried)
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.DiscardHandler)
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"MissingName":                   {Config{Logger: logger}, "Name is required"},
		"NameWithDot":                   {Config{Name: "saga.v1", Logger: logger}, "may hold only"},
		"MissingLogger":                 {Config{Name: "saga"}, "Logger is required"},
		"ForeignSubject":                {Config{Name: "saga", Logger: logger, FilterSubjects: []string{"other.>"}}, "not a subject of stream"},
		"BackoffMaxBelowBase":           {Config{Name: "saga", Logger: logger, BackoffBase: time.Minute, BackoffMax: time.Second}, "BackoffMax"},
		"MaxAckPendingBelowConcurrency": {Config{Name: "saga", Logger: logger, Concurrency: 10, MaxAckPending: 5}, "MaxAckPending"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.NoError(t, Config{Name: "saga", Logger: logger}.Validate())
}

func TestDecide(t *testing.T) {
	t.Parallel()
	p := policy{maxDeliver: 5, backoffFunc: func(attempt uint64) time.Duration { return time.Duration(attempt) * time.Second }}
	pDouble := p
	pDouble.doubleAck = true
	transient := errors.New("connection reset")
	for name, tc := range map[string]struct {
		o    outcome
		p    policy
		want action
	}{
		"AppliedAcks":                  {outcome{kind: outcomeApplied, numDelivered: 1}, p, action{kind: actionAck}},
		"AppliedDoubleAcks":            {outcome{kind: outcomeApplied, numDelivered: 1}, pDouble, action{kind: actionDoubleAck}},
		"DuplicateAcks":                {outcome{kind: outcomeDuplicate, numDelivered: 2}, p, action{kind: actionAck}},
		"DuplicateDoubleAcks":          {outcome{kind: outcomeDuplicate, numDelivered: 2}, pDouble, action{kind: actionDoubleAck}},
		"DuplicateAfterMaxDeliverAcks": {outcome{kind: outcomeDuplicate, numDelivered: 9}, p, action{kind: actionAck}},
		"NoEffectAcks":                 {outcome{kind: outcomeNoEffect, numDelivered: 1}, p, action{kind: actionAck}},
		"NoEffectDoubleAcks":           {outcome{kind: outcomeNoEffect, numDelivered: 1}, pDouble, action{kind: actionDoubleAck}},
		"InvalidDeadLetters": {
			outcome{kind: outcomeInvalid, err: &invalidEnvelopeError{"not JSON"}, numDelivered: 1}, p,
			action{kind: actionDeadLetter, reason: "invalid envelope: not JSON"},
		},
		"PermanentDeadLetters": {
			outcome{kind: outcomePermanent, err: Permanent(errors.New("unknown seat")), numDelivered: 1}, p,
			action{kind: actionDeadLetter, reason: "permanent failure: unknown seat"},
		},
		"TransientNaksWithBackoff": {
			outcome{kind: outcomeTransient, err: transient, numDelivered: 3}, p,
			action{kind: actionNak, delay: 3 * time.Second},
		},
		"TransientOnLastDeliveryDeadLetters": {
			outcome{kind: outcomeTransient, err: transient, numDelivered: 5}, p,
			action{kind: actionDeadLetter, reason: "gave up after 5 deliveries: connection reset"},
		},
		"PanicOnLastDeliveryHidesThePanicValue": {
			outcome{kind: outcomeTransient, err: &panicError{value: "card 4242"}, numDelivered: 5}, p,
			action{kind: actionDeadLetter, reason: "gave up after 5 deliveries: handler panicked"},
		},
		"ExhaustedDeadLetters": {
			outcome{kind: outcomeExhausted, err: errExhausted, numDelivered: 6}, p,
			action{kind: actionDeadLetter, reason: "gave up after 5 deliveries"},
		},
		"InterruptedNaksAtOnce": {
			outcome{kind: outcomeInterrupted, err: context.Canceled, numDelivered: 5}, p,
			action{kind: actionNak},
		},
		"DeadLetterFailureNaksWithBackoff": {
			outcome{kind: outcomeDeadLetterFailed, err: errors.New("no responders"), numDelivered: 7}, p,
			action{kind: actionNak, delay: 7 * time.Second},
		},
		"ReasonIsOneShortLine": {
			outcome{kind: outcomePermanent, err: Permanent(errors.New("line one\nline two" + strings.Repeat("é", 200))), numDelivered: 1}, p,
			action{kind: actionDeadLetter, reason: reasonText("permanent failure: line one line two" + strings.Repeat("é", 200))},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got := decide(tc.o, tc.p)
			require.Equal(t, tc.want, got)
			require.LessOrEqual(t, len(got.reason), maxReasonBytes)
			require.NotContains(t, got.reason, "\n")
		})
	}
}

func TestBackoff(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		attempt uint64
		jitter  float64
		want    time.Duration
	}{
		"FirstAttempt":        {1, 0, time.Second},
		"SecondAttempt":       {2, 0, 16 * time.Second},
		"ThirdAttempt":        {3, 0, 81 * time.Second},
		"JitterDown":          {2, -0.1, 14400 * time.Millisecond},
		"JitterUp":            {2, 0.1, 17600 * time.Millisecond},
		"Capped":              {6, 0, 10 * time.Minute},
		"HugeAttemptIsCapped": {1 << 40, 0.1, 10 * time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.InDelta(t, tc.want, backoff(tc.attempt, time.Second, 10*time.Minute, tc.jitter), float64(time.Microsecond))
		})
	}
	t.Run("JitterStaysWithinTenPercent", func(t *testing.T) {
		t.Parallel()
		f := jitteredBackoff(time.Second, time.Hour)
		for range 1000 {
			d := f(3)
			require.GreaterOrEqual(t, d, 72900*time.Millisecond)
			require.LessOrEqual(t, d, 89100*time.Millisecond)
		}
	})
}

func TestDecodeEnvelope(t *testing.T) {
	t.Parallel()
	valid := map[string]any{
		"event_id": uuid.New(), "event_type": "TestEvent", "schema_version": 1, "aggregate_type": "order",
		"aggregate_id": uuid.New(), "occurred_at": time.Now(), "correlation_id": "c", "payload": map[string]any{}, "added_later": true,
	}
	without := func(key string, value ...any) []byte {
		m := map[string]any{}
		for k, v := range valid {
			if k != key {
				m[k] = v
			}
		}
		if len(value) > 0 {
			m[key] = value[0]
		}
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return b
	}
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"Valid":                {without(""), ""},
		"NotJSON":              {[]byte("{"), "invalid envelope: not JSON"},
		"Null":                 {[]byte("null"), "invalid envelope: missing event_id"},
		"MissingEventID":       {without("event_id"), "invalid envelope: missing event_id"},
		"EventIDNotUUID":       {without("event_id", "secret-value"), "invalid envelope: does not decode"},
		"SchemaVersionString":  {without("schema_version", "1"), "invalid envelope: field schema_version has the wrong type"},
		"MissingEventType":     {without("event_type"), "invalid envelope: missing event_type"},
		"MissingSchemaVersion": {without("schema_version"), "invalid envelope: missing schema_version"},
		"MissingAggregateType": {without("aggregate_type"), "invalid envelope: missing aggregate_type"},
		"MissingAggregateID":   {without("aggregate_id"), "invalid envelope: missing aggregate_id"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := decodeEnvelope(tc.data)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.want)
			require.NotContains(t, err.Error(), "secret-value")
		})
	}
}
