package consumers

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
	"boxoffice/platform/outbox"
)

// newExternalConsumer is newConsumer for an ExternalFunc.
func (b *testBundle) newExternalConsumer(t *testing.T, cfg Config, f ExternalFunc) *Consumer {
	t.Helper()
	cfg.Name = cmp.Or(cfg.Name, "test")
	cfg.BackoffBase = cmp.Or(cfg.BackoffBase, time.Millisecond)
	cfg.BackoffMax = cmp.Or(cfg.BackoffMax, 100*time.Millisecond)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if cfg.Registerer == nil {
		cfg.Registerer = b.reg
	}
	c, err := NewExternal(b.pool, b.js, cfg, f)
	require.NoError(t, err)
	return c
}

// openTransactions counts the transactions open on the test's database
// other than the caller's own connection.
func (b *testBundle) openTransactions(ctx context.Context) (int64, error) {
	var n int64
	err := b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL`).Scan(&n)
	return n, err
}

func TestExternal(t *testing.T) {
	t.Parallel()

	t.Run("CallsOutBeforeTheTransactionThenAppliesInIt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var mu sync.Mutex
		var steps []string
		var openDuringCall, inboxDuringCall atomic.Int64
		c := b.newExternalConsumer(t, Config{}, func(ctx context.Context, ev outbox.Envelope) (HandlerFunc, error) {
			n, err := b.openTransactions(ctx)
			if err != nil {
				return nil, err
			}
			openDuringCall.Store(n)
			if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM inbox WHERE event_id = $1`, ev.EventID).Scan(&n); err != nil {
				return nil, err
			}
			inboxDuringCall.Store(n)
			mu.Lock()
			steps = append(steps, "external")
			mu.Unlock()
			return func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
				mu.Lock()
				steps = append(steps, "in_tx")
				mu.Unlock()
				return insertEffect(ctx, tx, ev)
			}, nil
		})
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		run(t, c)

		b.waitSettled(t, "test", seq)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"external", "in_tx"}, steps)
		require.Zero(t, openDuringCall.Load(), "no transaction was open during the external call")
		require.Zero(t, inboxDuringCall.Load(), "the inbox row is written after the call")
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, ev.EventID))
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM inbox WHERE consumer = 'test' AND event_id = $1`, ev.EventID))
		require.Empty(t, b.deadLetters(t))
	})

	t.Run("RetryableCallErrorNaksAndRetries", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls, applied atomic.Int64
		c := b.newExternalConsumer(t, Config{}, func(ctx context.Context, ev outbox.Envelope) (HandlerFunc, error) {
			if calls.Add(1) < 3 {
				return nil, errors.New("provider unavailable")
			}
			return effectHandler(&applied), nil
		})
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		run(t, c)

		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(3), calls.Load())
		require.Equal(t, int64(1), applied.Load())
		require.Equal(t, uint64(3), b.info(t, "test").Delivered.Consumer)
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effects`))
		require.Empty(t, b.deadLetters(t))
		var retried bool
		for _, l := range b.logs.Lines(t) {
			if l["msg"] == "handler failed; retrying later" {
				retried = true
				require.Equal(t, "provider unavailable", l["error"])
				require.Equal(t, ev.EventID.String(), l["event_id"])
			}
		}
		require.True(t, retried, "the failed call was logged with the event")
	})

	t.Run("PermanentCallErrorDeadLettersWithoutTransaction", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls, applied atomic.Int64
		c := b.newExternalConsumer(t, Config{}, func(ctx context.Context, ev outbox.Envelope) (HandlerFunc, error) {
			calls.Add(1)
			return effectHandler(&applied), Permanent(errors.New("card declined"))
		})
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		run(t, c)

		dl := b.waitDeadLetters(t, 1)[0]
		b.waitSettled(t, "test", seq)
		require.Equal(t, "permanent failure: card declined", dl.Header.Get(HeaderReason))
		require.Equal(t, int64(1), calls.Load())
		require.Zero(t, applied.Load(), "the returned handler is ignored when the call failed")
		require.Zero(t, b.count(t, `SELECT count(*) FROM inbox`))
	})

	t.Run("RedeliveryAfterCommitSkipsTheCall", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls, applied atomic.Int64
		c := b.newExternalConsumer(t, Config{AckWait: time.Second}, func(ctx context.Context, ev outbox.Envelope) (HandlerFunc, error) {
			calls.Add(1)
			return effectHandler(&applied), nil
		})
		c.afterCommitFunc = func(_ outbox.Envelope, numDelivered uint64) bool { return numDelivered == 1 }
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		run(t, c)

		b.waitSettled(t, "test", seq)
		require.Equal(t, uint64(2), b.info(t, "test").Delivered.Consumer, "delivered twice")
		require.Equal(t, int64(1), calls.Load(), "the inbox spared the second call")
		require.Equal(t, int64(1), applied.Load())
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effects`))
	})

	t.Run("FailureInTheTransactionRepeatsTheCall", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls, applied atomic.Int64
		c := b.newExternalConsumer(t, Config{}, func(ctx context.Context, ev outbox.Envelope) (HandlerFunc, error) {
			call := calls.Add(1)
			return func(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
				if err := effectHandler(&applied)(ctx, tx, ev); err != nil {
					return err
				}
				if call == 1 {
					return errors.New("crashed before commit")
				}
				return nil
			}, nil
		})
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		run(t, c)

		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(2), calls.Load(), "the call is made again: its result was not recorded")
		require.Equal(t, int64(2), applied.Load())
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effects`), "the first attempt rolled back")
	})

	t.Run("ConcurrentDeliveriesCommitOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls, applied atomic.Int64
		bothCalled := make(chan struct{})
		var once sync.Once
		c := b.newExternalConsumer(t, Config{Concurrency: 2}, func(ctx context.Context, ev outbox.Envelope) (HandlerFunc, error) {
			if calls.Add(1) == 2 {
				once.Do(func() { close(bothCalled) })
			}
			select { // both copies pass the inbox read before either commits
			case <-bothCalled:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return effectHandler(&applied), nil
		})
		ev, raw := testEvent(t)
		b.publish(t, "copy-1", raw)
		seq := b.publish(t, "copy-2", raw)
		run(t, c)

		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(2), calls.Load())
		require.Equal(t, int64(1), applied.Load(), "the inbox insert skipped the second handler")
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, ev.EventID))
		require.Equal(t, float64(2), b.metric(t, "boxoffice_consumer_acked_total", "test"))
	})

	t.Run("PanicInTheCallIsTransient", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var calls, applied atomic.Int64
		c := b.newExternalConsumer(t, Config{}, func(ctx context.Context, ev outbox.Envelope) (HandlerFunc, error) {
			if calls.Add(1) == 1 {
				panic("provider client bug")
			}
			return effectHandler(&applied), nil
		})
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		run(t, c)

		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(2), calls.Load())
		require.Equal(t, int64(1), applied.Load())
		require.Empty(t, b.deadLetters(t))
	})

	t.Run("NilHandlerRecordsOnlyTheInbox", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c := b.newExternalConsumer(t, Config{}, func(context.Context, outbox.Envelope) (HandlerFunc, error) { return nil, nil })
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		run(t, c)

		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM inbox WHERE event_id = $1`, ev.EventID))
	})

	t.Run("ExhaustedMessageIsNotCalledAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		require.NoError(t, b.js.DeleteStream(ctx, bus.DLQStream))
		var calls atomic.Int64
		c := b.newExternalConsumer(t, Config{MaxDeliver: 1, BackoffMax: 20 * time.Millisecond}, func(context.Context, outbox.Envelope) (HandlerFunc, error) {
			calls.Add(1)
			return nil, errors.New("still down")
		})
		ev, raw := testEvent(t)
		seq := b.publishEvent(t, ev, raw)
		run(t, c)

		// Delivery 1 fails and cannot be dead-lettered; the deliveries after
		// it find the message exhausted and make no call.
		require.Eventually(t, func() bool {
			return b.metric(t, "boxoffice_consumer_redelivered_total", "test") >= 2
		}, waitFor, 10*time.Millisecond)
		require.NoError(t, bus.Provision(ctx, b.js, bus.Config{}))
		dl := b.waitDeadLetters(t, 1)[0]
		b.waitSettled(t, "test", seq)
		require.Equal(t, "gave up after 1 deliveries", dl.Header.Get(HeaderReason))
		require.Equal(t, int64(1), calls.Load())
	})
}

func TestNewExternalRequiresAFunc(t *testing.T) {
	t.Parallel()
	_, err := NewExternal(nil, nil, Config{Name: "x", Logger: slog.New(slog.DiscardHandler)}, nil)
	require.Error(t, err)
}
