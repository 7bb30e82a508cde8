package consumers

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/db"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
)

// fetchBatch provisions c's durable consumer and pulls exactly n messages
// from it, the way Run's workers would have them buffered: handing them to
// handleBatch makes one batch of exactly these messages.
func fetchBatch(t *testing.T, c *Consumer, n int) []jetstream.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cons, err := c.provision(ctx)
	require.NoError(t, err)
	var msgs []jetstream.Msg
	for len(msgs) < n {
		batch, err := cons.Fetch(n-len(msgs), jetstream.FetchMaxWait(time.Second))
		require.NoError(t, err)
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		require.NoError(t, batch.Error())
	}
	return msgs
}

// publishEvents publishes n fresh test events and returns them and the
// last stream sequence.
func (b *testBundle) publishEvents(t *testing.T, n int) ([]outbox.Envelope, uint64) {
	t.Helper()
	evs := make([]outbox.Envelope, n)
	var seq uint64
	for i := range evs {
		ev, raw := testEvent(t)
		evs[i], seq = ev, b.publishEvent(t, ev, raw)
	}
	return evs, seq
}

// txidHandler records each event it applies in effects together with the
// id of the transaction that applied it, and counts its calls.
func txidHandler(calls *atomic.Int64, fail func(outbox.Envelope) error) HandlerFunc {
	return func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
		calls.Add(1)
		if err := fail(ev); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, consumer, txid) VALUES ($1, 'test', txid_current())`, ev.EventID)
		return err
	}
}

// requireRetriedAloneThenDeadLettered runs c and requires that poison,
// the one event of a batch of n that failed, is retried alone, run on each
// of its two deliveries (runs counts them) and dead-lettered, and that the
// n-1 others are never applied again.
func (b *testBundle) requireRetriedAloneThenDeadLettered(t *testing.T, c *Consumer, poison outbox.Envelope, seq uint64, runs *atomic.Int64, n int) {
	t.Helper()
	run(t, c)
	dls := b.waitDeadLetters(t, 1)
	require.Equal(t, poison.EventID.String(), dls[0].Header.Get(HeaderEventID))
	b.waitSettled(t, "test", seq)
	require.Equal(t, int64(2), runs.Load(), "run on each of its MaxDeliver deliveries")
	require.Equal(t, int64(n-1), b.count(t, `SELECT count(*) FROM effects`))
}

func TestBatch(t *testing.T) {
	t.Parallel()
	const n = 10

	// A poison message in the middle of a full batch is dead-lettered
	// alone; the nine others commit in one transaction and are acked.
	for _, poisonKind := range []string{"Permanent", "Panic", "Transient"} {
		t.Run("PoisonMessageFailsAlone/"+poisonKind, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			dbtest.Exec(t, b.pool, `ALTER TABLE effects ADD COLUMN txid bigint`)
			evs, seq := b.publishEvents(t, n)
			poison := evs[n/2]
			var calls atomic.Int64
			var poisonRuns atomic.Int64
			c := b.newConsumer(t, Config{BatchSize: n, MaxDeliver: 2, BackoffBase: time.Millisecond}, txidHandler(&calls, func(ev outbox.Envelope) error {
				if ev.EventID != poison.EventID {
					return nil
				}
				poisonRuns.Add(1)
				switch poisonKind {
				case "Permanent":
					return Permanent(errors.New("no retry can apply this"))
				case "Panic":
					panic("handler bug")
				default:
					return errors.New("provider unavailable")
				}
			}))

			c.handleBatch(context.Background(), fetchBatch(t, c, n))

			require.Equal(t, int64(n-1), b.count(t, `SELECT count(*) FROM effects`))
			require.Equal(t, int64(1), b.count(t, `SELECT count(DISTINCT txid) FROM effects`), "the nine committed in one transaction")
			require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, poison.EventID))
			require.Equal(t, int64(n-1), b.count(t, `SELECT count(*) FROM inbox WHERE consumer = 'test'`))
			require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM inbox WHERE event_id = $1`, poison.EventID),
				"the poison's inbox row rolled back with it")
			require.Equal(t, float64(n-1), b.metric(t, "boxoffice_consumer_acked_total", "test"))

			if poisonKind == "Permanent" {
				dls := b.waitDeadLetters(t, 1)
				require.Equal(t, poison.EventID.String(), dls[0].Header.Get(HeaderEventID))
				b.waitSettled(t, "test", seq)
				require.Equal(t, int64(1), poisonRuns.Load())
				return
			}
			// A retryable failure is retried alone, and dead-lettered on
			// its last delivery; the nine are never applied again.
			b.requireRetriedAloneThenDeadLettered(t, c, poison, seq, &poisonRuns, n)
		})
	}

	// A handler's write deferred to a later statement (db.Deferring) that
	// fails there fails its own event, not the handler whose statement
	// (or the COMMIT) carried it: the poison is retried alone and
	// dead-lettered, the nine others commit in one transaction.
	for _, at := range []struct {
		name string
		i    int
	}{{"CarriedByTheNextHandler", n / 2}, {"CarriedByTheCommit", n - 1}} {
		t.Run("FailedDeferredWriteFailsItsOwnEvent/"+at.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			dbtest.Exec(t, b.pool, `ALTER TABLE effects ADD COLUMN txid bigint`)
			evs, seq := b.publishEvents(t, n)
			// A batch runs its handlers in order id order.
			slices.SortFunc(evs, func(a, b outbox.Envelope) int { return bytes.Compare(a.AggregateID[:], b.AggregateID[:]) })
			poison := evs[at.i]
			var poisonRuns atomic.Int64
			c := b.newConsumer(t, Config{BatchSize: n, MaxDeliver: 2, BackoffBase: time.Millisecond},
				func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
					if _, err := tx.Exec(ctx, `SELECT 1`); err != nil { // carries the writes deferred before
						return err
					}
					consumer := "test"
					if ev.EventID == poison.EventID {
						poisonRuns.Add(1)
						consumer = "" // NOT NULL: fails on the server, in the statement that carries it
					}
					_, err := db.Deferring(tx).Exec(ctx, `INSERT INTO effects (event_id, consumer, txid)
						VALUES ($1, nullif($2, ''), txid_current())`, ev.EventID, consumer)
					return err
				})

			c.handleBatch(context.Background(), fetchBatch(t, c, n))

			require.Equal(t, int64(n-1), b.count(t, `SELECT count(*) FROM effects`))
			require.Equal(t, int64(1), b.count(t, `SELECT count(DISTINCT txid) FROM effects`), "the nine committed in one transaction")
			require.Equal(t, int64(0), b.count(t, `SELECT count(*) FROM inbox WHERE event_id = $1`, poison.EventID))
			require.Equal(t, float64(n-1), b.metric(t, "boxoffice_consumer_acked_total", "test"))

			b.requireRetriedAloneThenDeadLettered(t, c, poison, seq, &poisonRuns, n)
		})
	}

	// A process that dies after a batch committed and before any ack gets
	// the whole batch redelivered; every redelivery is an inbox no-op,
	// counted as a duplicate.
	t.Run("CrashAfterCommitBeforeAcks", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dbtest.Exec(t, b.pool, `ALTER TABLE effects ADD COLUMN txid bigint`)
		evs, seq := b.publishEvents(t, n)
		var calls, crashes atomic.Int64
		c := b.newConsumer(t, Config{BatchSize: n, AckWait: time.Second}, txidHandler(&calls, func(outbox.Envelope) error { return nil }))
		c.afterCommitFunc = func(_ outbox.Envelope, numDelivered uint64) bool {
			if numDelivered == 1 {
				crashes.Add(1)
				return true
			}
			return false
		}

		c.handleBatch(context.Background(), fetchBatch(t, c, n))
		require.Equal(t, int64(n), crashes.Load())
		require.Equal(t, int64(1), b.count(t, `SELECT count(DISTINCT txid) FROM effects`), "one commit")

		run(t, c) // the batch comes back after AckWait
		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(n), calls.Load(), "no handler ran twice")
		for _, ev := range evs {
			require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, ev.EventID))
		}
		require.Equal(t, float64(n), b.metric(t, "boxoffice_consumer_duplicates_total", "test"))
		require.Equal(t, float64(n), b.metric(t, "boxoffice_consumer_acked_total", "test"))
		require.Empty(t, b.deadLetters(t))
	})

	// The same event id twice in one batch (a republish outside the
	// stream's duplicate window) is applied once.
	t.Run("SameEventTwiceInOneBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev, raw := testEvent(t)
		b.publish(t, "first", raw)
		seq := b.publish(t, "second", raw)
		var calls atomic.Int64
		c := b.newConsumer(t, Config{BatchSize: n}, effectHandler(&calls))

		c.handleBatch(context.Background(), fetchBatch(t, c, 2))
		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(1), calls.Load())
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, ev.EventID))
		require.Equal(t, float64(1), b.metric(t, "boxoffice_consumer_duplicates_total", "test"))
	})

	// An external consumer makes the batch's calls, then records them in
	// one transaction; a call that fails settles its own message.
	t.Run("ExternalCallsThenOneTransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dbtest.Exec(t, b.pool, `ALTER TABLE effects ADD COLUMN txid bigint`)
		evs, seq := b.publishEvents(t, n)
		refused := evs[2].EventID
		var calls, records atomic.Int64
		c := b.newExternalConsumer(t, Config{BatchSize: n, MaxDeliver: 1}, func(ctx context.Context, ev outbox.Envelope) (HandlerFunc, error) {
			calls.Add(1)
			if ev.EventID == refused {
				return nil, Permanent(errors.New("refused by the provider"))
			}
			return txidHandler(&records, func(outbox.Envelope) error { return nil }), nil
		})

		c.handleBatch(context.Background(), fetchBatch(t, c, n))
		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(n), calls.Load(), "one call per message")
		require.Equal(t, int64(n-1), records.Load(), "each recorded once")
		require.Equal(t, int64(1), b.count(t, `SELECT count(DISTINCT txid) FROM effects`))
		dls := b.waitDeadLetters(t, 1)
		require.Equal(t, refused.String(), dls[0].Header.Get(HeaderEventID))
	})

	// A batch's calls run concurrently, but never more than CallConcurrency
	// at once: a provider rate-limits bursts.
	t.Run("ExternalCallsAreBounded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, seq := b.publishEvents(t, n)
		var now, most, calls atomic.Int64
		c := b.newExternalConsumer(t, Config{BatchSize: n, CallConcurrency: 3}, func(ctx context.Context, ev outbox.Envelope) (HandlerFunc, error) {
			calls.Add(1)
			cur := now.Add(1)
			defer now.Add(-1)
			for m := most.Load(); cur > m && !most.CompareAndSwap(m, cur); m = most.Load() {
			}
			time.Sleep(20 * time.Millisecond) // long enough for the others to pile up
			return nil, nil
		})

		c.handleBatch(context.Background(), fetchBatch(t, c, n))
		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(n), calls.Load())
		require.LessOrEqual(t, most.Load(), int64(3), "never more than three calls at once")
		require.GreaterOrEqual(t, most.Load(), int64(2), "the calls do run concurrently")
	})

	// At low load a worker does not wait for a batch to fill: a single
	// message is applied alone, at once.
	t.Run("RunAppliesWhatIsBuffered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls atomic.Int64
		c := b.newConsumer(t, Config{BatchSize: 64, Concurrency: 1}, effectHandler(&calls))
		run(t, c)
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(1), calls.Load())
	})
}
