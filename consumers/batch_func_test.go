package consumers

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/db"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
)

// newBatchConsumer builds a consumer with a BatchFunc on pool (the test's
// own when nil), with newConsumer's test defaults.
func (b *testBundle) newBatchConsumer(t *testing.T, pool *pgxpool.Pool, cfg Config, f BatchFunc) *Consumer {
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
	if pool == nil {
		pool = b.pool
	}
	c, err := NewBatch(pool, b.js, cfg, f)
	require.NoError(t, err)
	return c
}

// tracedPool is a second pool on the test's database whose work the
// returned tracer counts.
func (b *testBundle) tracedPool(t *testing.T) (*pgxpool.Pool, *db.CostTracer) {
	t.Helper()
	costs := db.NewCostTracer()
	pool, err := db.NewPool(context.Background(), db.PoolConfig{URL: b.pool.Config().ConnString(), Tracer: costs})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, costs
}

// applyEffects is an ApplyFunc that records all of evs in effects in one
// statement, with the id of its transaction, and counts its calls and the
// events it was given; it fails (before writing) when fail says so.
func applyEffects(calls, events *atomic.Int64, fail func([]outbox.Envelope) error) ApplyFunc {
	return func(ctx context.Context, tx pgx.Tx, evs []outbox.Envelope) error {
		calls.Add(1)
		events.Add(int64(len(evs)))
		if err := fail(evs); err != nil {
			return err
		}
		ids := make([]uuid.UUID, len(evs))
		for i, ev := range evs {
			ids[i] = ev.EventID
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, consumer, txid) SELECT id, 'test', txid_current() FROM unnest($1::uuid[]) AS id`, ids)
		return err
	}
}

func noFailure([]outbox.Envelope) error { return nil }

// costOf is role's cost in costs, zero when it did nothing.
func costOf(costs *db.CostTracer, role string) db.Cost {
	for _, c := range costs.Costs() {
		if c.Role == role {
			c.StatementTime = 0 // the clock's; the counts are exact
			return c.Cost
		}
	}
	return db.Cost{}
}

func TestBatchFunc(t *testing.T) {
	t.Parallel()
	const n = 10

	// The BatchFunc runs once for the batch, outside any transaction, and
	// its ApplyFunc once for every event, in the one transaction that
	// inserts their inbox rows.
	t.Run("AppliesTheBatchInOneCall", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dbtest.Exec(t, b.pool, `ALTER TABLE effects ADD COLUMN txid bigint`)
		_, seq := b.publishEvents(t, n)
		pool, costs := b.tracedPool(t)
		var plans, applies, applied atomic.Int64
		c := b.newBatchConsumer(t, pool, Config{BatchSize: n}, func(ctx context.Context, evs []outbox.Envelope) (BatchPlan, error) {
			plans.Add(1)
			require.Len(t, evs, n)
			return BatchPlan{ApplyFunc: applyEffects(&applies, &applied, noFailure)}, nil
		})

		c.handleBatch(db.WithRole(context.Background(), "test"), fetchBatch(t, c, n))
		b.waitSettled(t, "test", seq)
		require.Equal(t, int64(1), plans.Load())
		require.Equal(t, int64(1), applies.Load())
		require.Equal(t, int64(n), applied.Load())
		require.Equal(t, int64(n), b.count(t, `SELECT count(*) FROM effects`))
		require.Equal(t, int64(1), b.count(t, `SELECT count(DISTINCT txid) FROM effects`))
		require.Equal(t, int64(n), b.count(t, `SELECT count(*) FROM inbox WHERE consumer = 'test'`))
		require.Equal(t, float64(n), b.metric(t, "boxoffice_consumer_acked_total", "test"))
		// BEGIN with the inbox insert (db.WithTx), the ApplyFunc's one
		// statement, COMMIT.
		require.Equal(t, int64(3), costOf(costs, "test").RoundTrips)
	})

	// An event the BatchFunc finds nothing to apply for is acked with no
	// inbox row; when no event of the batch has anything to apply, no
	// transaction runs at all.
	for name, all := range map[string]bool{"SomeHaveNoEffect": false, "NoneHasAnEffect": true} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			dbtest.Exec(t, b.pool, `ALTER TABLE effects ADD COLUMN txid bigint`)
			evs, seq := b.publishEvents(t, n)
			var nothing []uuid.UUID
			for i, ev := range evs {
				if all || i%2 == 1 {
					nothing = append(nothing, ev.EventID)
				}
			}
			pool, costs := b.tracedPool(t)
			var applies, applied atomic.Int64
			c := b.newBatchConsumer(t, pool, Config{BatchSize: n}, func(ctx context.Context, evs []outbox.Envelope) (BatchPlan, error) {
				errs := make([]error, len(evs))
				for i, ev := range evs {
					if slices.Contains(nothing, ev.EventID) {
						errs[i] = ErrNoEffect
					}
				}
				return BatchPlan{Errs: errs, ApplyFunc: applyEffects(&applies, &applied, noFailure)}, nil
			})

			c.handleBatch(db.WithRole(context.Background(), "test"), fetchBatch(t, c, n))
			b.waitSettled(t, "test", seq)
			require.Equal(t, float64(n), b.metric(t, "boxoffice_consumer_acked_total", "test"))
			require.Empty(t, b.deadLetters(t))
			require.Equal(t, int64(n-len(nothing)), applied.Load())
			require.Equal(t, int64(n-len(nothing)), b.count(t, `SELECT count(*) FROM inbox WHERE consumer = 'test'`))
			require.Zero(t, b.count(t, `SELECT count(*) FROM inbox WHERE event_id = ANY ($1)`, nothing), "no inbox row for nothing")
			if all {
				require.Zero(t, applies.Load())
				require.Equal(t, db.Cost{}, costOf(costs, "test"), "no transaction, no statement")
				return
			}
			require.Equal(t, int64(3), costOf(costs, "test").RoundTrips, "one transaction for the others")
		})
	}

	// An event's own error in the plan settles its message alone; the
	// rest of the batch is applied in one transaction.
	t.Run("PlannedErrorSettlesItsOwnMessage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dbtest.Exec(t, b.pool, `ALTER TABLE effects ADD COLUMN txid bigint`)
		evs, seq := b.publishEvents(t, n)
		poison := evs[3].EventID
		var applies, applied atomic.Int64
		c := b.newBatchConsumer(t, nil, Config{BatchSize: n}, func(ctx context.Context, evs []outbox.Envelope) (BatchPlan, error) {
			errs := make([]error, len(evs))
			for i, ev := range evs {
				if ev.EventID == poison {
					errs[i] = Permanent(errors.New("no retry can apply this"))
				}
			}
			return BatchPlan{Errs: errs, ApplyFunc: applyEffects(&applies, &applied, noFailure)}, nil
		})

		c.handleBatch(context.Background(), fetchBatch(t, c, n))
		b.waitSettled(t, "test", seq)
		dls := b.waitDeadLetters(t, 1)
		require.Equal(t, poison.String(), dls[0].Header.Get(HeaderEventID))
		require.Equal(t, int64(1), applies.Load())
		require.Equal(t, int64(n-1), b.count(t, `SELECT count(*) FROM effects`))
		require.Zero(t, b.count(t, `SELECT count(*) FROM inbox WHERE event_id = $1`, poison))
	})

	// When the ApplyFunc fails for the whole batch, which event failed is
	// not known: each is applied again alone, and only the one that fails
	// alone is settled with its error.
	t.Run("ApplyFailureIsFoundByApplyingAlone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dbtest.Exec(t, b.pool, `ALTER TABLE effects ADD COLUMN txid bigint`)
		evs, seq := b.publishEvents(t, n)
		poison := evs[6].EventID
		var applies, applied atomic.Int64
		c := b.newBatchConsumer(t, nil, Config{BatchSize: n}, func(ctx context.Context, evs []outbox.Envelope) (BatchPlan, error) {
			return BatchPlan{ApplyFunc: applyEffects(&applies, &applied, func(evs []outbox.Envelope) error {
				if slices.ContainsFunc(evs, func(ev outbox.Envelope) bool { return ev.EventID == poison }) {
					return Permanent(errors.New("no retry can apply this"))
				}
				return nil
			})}, nil
		})

		c.handleBatch(context.Background(), fetchBatch(t, c, n))
		b.waitSettled(t, "test", seq)
		dls := b.waitDeadLetters(t, 1)
		require.Equal(t, poison.String(), dls[0].Header.Get(HeaderEventID))
		require.Equal(t, int64(1+n), applies.Load(), "the batch, then each alone")
		require.Equal(t, int64(n-1), b.count(t, `SELECT count(*) FROM effects`))
		require.Equal(t, int64(n-1), b.count(t, `SELECT count(*) FROM inbox WHERE consumer = 'test'`))
		require.Equal(t, float64(n-1), b.metric(t, "boxoffice_consumer_acked_total", "test"))
	})

	// A BatchFunc that panics naks the whole batch with backoff; the
	// redelivered batch is applied once.
	t.Run("PanickingPlanRetriesTheBatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dbtest.Exec(t, b.pool, `ALTER TABLE effects ADD COLUMN txid bigint`)
		evs, seq := b.publishEvents(t, n)
		var plans, applies, applied atomic.Int64
		c := b.newBatchConsumer(t, nil, Config{BatchSize: n}, func(ctx context.Context, evs []outbox.Envelope) (BatchPlan, error) {
			if plans.Add(1) == 1 {
				panic("plan bug")
			}
			return BatchPlan{ApplyFunc: applyEffects(&applies, &applied, noFailure)}, nil
		})

		run(t, c)
		b.waitSettled(t, "test", seq)
		require.Empty(t, b.deadLetters(t))
		for _, ev := range evs {
			require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM effects WHERE event_id = $1`, ev.EventID))
		}
	})
}
