package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"boxoffice/domain/purchase"
	"boxoffice/platform/bus"
	"boxoffice/platform/outbox"
	"boxoffice/relay"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
	"boxoffice/testkit/natstest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type testBundle struct {
	pool *pgxpool.Pool
	nats *natstest.Server
	// js is the test's own view of the stream, on its own connection.
	js jetstream.JetStream
}

func setup(tb testing.TB) *testBundle {
	tb.Helper()
	srv := natstest.New(tb)
	_, js := srv.Connect(tb)
	pool := dbtest.New(tb)
	if _, ok := tb.(*testing.T); ok {
		// The relay deletes what it published; tests remember every row
		// ever written so they can compare the stream with it. Benchmarks
		// do without the trigger's cost.
		dbtest.Exec(tb, pool, `CREATE TABLE outbox_log (id uuid PRIMARY KEY)`)
		dbtest.Exec(tb, pool, `CREATE FUNCTION outbox_log() RETURNS trigger LANGUAGE plpgsql AS
			'BEGIN INSERT INTO outbox_log VALUES (NEW.id) ON CONFLICT DO NOTHING; RETURN NEW; END'`)
		dbtest.Exec(tb, pool, `CREATE TRIGGER outbox_log AFTER INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION outbox_log()`)
	}
	return &testBundle{pool: pool, nats: srv, js: js}
}

// newRelay builds a relay on a connection of its own, as a separate
// process would have, with a registry of its own to read its metrics from.
func (b *testBundle) newRelay(tb testing.TB, cfg relay.Config) (*relay.Relay, *prometheus.Registry) {
	tb.Helper()
	nc, _ := b.nats.Connect(tb)
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	if cfg.Logger == nil {
		cfg.Logger = testLogger(tb)
	}
	r, err := relay.New(b.pool, nc, cfg)
	require.NoError(tb, err)
	return r, reg
}

func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// running is a relay whose Run is in progress.
type running struct {
	cancel context.CancelFunc
	result func() error
}

// start runs r until ctx is done, stop is called or the test ends.
func start(tb testing.TB, ctx context.Context, r *relay.Relay) *running {
	tb.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	rr := &running{cancel: cancel, result: sync.OnceValue(func() error {
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			return errors.New("relay did not stop within a minute")
		}
	})}
	tb.Cleanup(func() { cancel(); _ = rr.result() })
	return rr
}

// stop cancels the relay and returns what Run returned.
func (rr *running) stop() error {
	rr.cancel()
	return rr.result()
}

// insertRows writes n pending HoldCreated rows with envelopes of about
// 600 bytes in one statement.
func insertRows(tb testing.TB, pool *pgxpool.Pool, n int) {
	tb.Helper()
	dbtest.Exec(tb, pool, `
		INSERT INTO outbox (id, subject, event_type, aggregate_id, envelope)
		SELECT id, 'ticketing.order.HoldCreated', 'HoldCreated', aggregate_id,
		       json_build_object('event_id', id, 'event_type', 'HoldCreated', 'schema_version', 1,
		                         'aggregate_type', 'order', 'aggregate_id', aggregate_id,
		                         'occurred_at', now(), 'correlation_id', 'test',
		                         'payload', json_build_object('pad', repeat('x', 300)))
		FROM (SELECT gen_random_uuid() AS id, gen_random_uuid() AS aggregate_id
		      FROM generate_series(1, $1::int)) AS g`, n)
}

func unpublished(tb testing.TB, pool *pgxpool.Pool) int64 {
	tb.Helper()
	return dbtest.Count(tb, pool, "SELECT count(*) FROM outbox")
}

// claimed counts live leases.
func claimed(tb testing.TB, pool *pgxpool.Pool) int64 {
	tb.Helper()
	return dbtest.Count(tb, pool, "SELECT count(*) FROM outbox_leases WHERE expires_at > now()")
}

// streamMsgs returns how many messages the stream holds.
func streamMsgs(tb testing.TB, js jetstream.JetStream) uint64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, bus.Stream)
	require.NoError(tb, err)
	info, err := s.Info(ctx)
	require.NoError(tb, err)
	return info.State.Msgs
}

// streamMsgIDs reads the whole stream and counts its messages per
// Nats-Msg-Id.
func streamMsgIDs(tb testing.TB, js jetstream.JetStream) map[uuid.UUID]int {
	tb.Helper()
	n := int(streamMsgs(tb, js))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, bus.Stream, jetstream.OrderedConsumerConfig{})
	require.NoError(tb, err)
	ids := make(map[uuid.UUID]int, n)
	for got := 0; got < n; {
		batch, err := cons.Fetch(min(1000, n-got), jetstream.FetchMaxWait(10*time.Second))
		require.NoError(tb, err)
		for msg := range batch.Messages() {
			id, err := uuid.Parse(msg.Headers().Get(jetstream.MsgIDHeader))
			require.NoError(tb, err)
			ids[id]++
			got++
		}
		require.NoError(tb, batch.Error())
	}
	return ids
}

// outboxIDs returns the id of every row ever written to the outbox.
func outboxIDs(tb testing.TB, pool *pgxpool.Pool) map[uuid.UUID]int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := pool.Query(ctx, "SELECT id FROM outbox_log")
	require.NoError(tb, err)
	ids := map[uuid.UUID]int{}
	for rows.Next() {
		var id uuid.UUID
		require.NoError(tb, rows.Scan(&id))
		ids[id] = 1
	}
	require.NoError(tb, rows.Err())
	return ids
}

// requireEachRowOnceInStream proves the stream holds exactly one message
// per outbox row and nothing else.
func requireEachRowOnceInStream(tb testing.TB, b *testBundle, n int) {
	tb.Helper()
	require.Equal(tb, uint64(n), streamMsgs(tb, b.js))
	want := outboxIDs(tb, b.pool)
	require.Len(tb, want, n)
	require.Equal(tb, want, streamMsgIDs(tb, b.js))
}

// metric sums the samples of the counter or gauge name in reg.
func metric(tb testing.TB, reg *prometheus.Registry, name string) float64 {
	tb.Helper()
	mfs, err := reg.Gather()
	require.NoError(tb, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

var errCrash = errors.New("injected crash")

// A relay that dies after JetStream acknowledged a batch and before it
// marked the rows leaves them claimed. Once the lease expires a later relay
// publishes them again; JetStream acknowledges those as duplicates without
// storing them, the rows end up published, and a durable consumer sees
// every event once.
func TestCrashAfterPublishIsDedupedByJetStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const n = 50
	insertRows(t, b.pool, n)

	// The consumer counts deliveries per Nats-Msg-Id.
	cons, err := b.js.CreateOrUpdateConsumer(ctx, bus.Stream, jetstream.ConsumerConfig{
		Durable: "crash-test", AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	var mu sync.Mutex
	deliveries := map[string]int{}
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		mu.Lock()
		deliveries[msg.Headers().Get(jetstream.MsgIDHeader)]++
		mu.Unlock()
		_ = msg.Ack()
	})
	require.NoError(t, err)
	t.Cleanup(cc.Stop)

	cfg := relay.Config{Lease: time.Second, AckTimeout: 750 * time.Millisecond}
	first, _ := b.newRelay(t, cfg)
	var crashedIDs []uuid.UUID
	relay.SetAfterPublishFunc(first, func(_ context.Context, ids []uuid.UUID) error {
		crashedIDs = ids
		return errCrash
	})
	require.ErrorIs(t, start(t, ctx, first).result(), errCrash)
	require.Len(t, crashedIDs, n)
	require.Equal(t, int64(n), unpublished(t, b.pool), "nothing marked: the relay died before marking")
	require.Equal(t, int64(n), dbtest.Count(t, b.pool, `SELECT count(*) FROM outbox o JOIN outbox_leases l
		ON o.seq BETWEEN l.first_seq AND l.last_seq WHERE l.relay_id = $1 AND l.expires_at > now()`, first.ID()),
		"the dead relay's lease still covers its rows")
	require.Equal(t, uint64(n), streamMsgs(t, b.js), "the crashed relay's publishes were stored")

	second, reg := b.newRelay(t, cfg)
	start(t, ctx, second)
	require.Eventually(t, func() bool { return unpublished(t, b.pool) == 0 }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, int64(0), claimed(t, b.pool))
	require.Eventually(t, func() bool { return dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox_leases") == 0 },
		10*time.Second, 10*time.Millisecond, "the dead relay's expired lease is forgotten")
	require.Equal(t, float64(n), metric(t, reg, "boxoffice_relay_duplicates_total"), "every republish was a JetStream duplicate")
	require.Equal(t, float64(0), metric(t, reg, "boxoffice_relay_published_total"))
	requireEachRowOnceInStream(t, b, n)

	require.Eventually(t, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.Delivered.Stream == uint64(n)
	}, 30*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, deliveries, n)
	for id, count := range deliveries {
		require.Equal(t, 1, count, "event %s applied more than once", id)
	}
}

// While NATS is down the relay keeps running and the held seats' events
// wait in the outbox; when NATS comes back every one of them reaches the
// stream, none twice, and the outbox is left with nothing unpublished or
// claimed.
func TestNATSOutageBacklogDrainsWhenNATSReturns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const holds = 1000
	ev := fixture.NewEvent(t, b.pool, fixture.EventSpec{Name: "outage", StartsAt: time.Now(), Currency: "usd", Rows: 10, SeatsPerRow: holds / 10, PriceMinor: 2500})
	seats := ev.Seats
	require.Len(t, seats, holds)

	r, reg := b.newRelay(t, relay.Config{AckTimeout: 2 * time.Second, StatsInterval: 50 * time.Millisecond})
	run := start(t, ctx, r)

	b.nats.Stop()
	svc := purchase.NewService(b.pool, testLogger(t), purchase.Config{})
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, seat := range seats {
		g.Go(func() error {
			_, err := svc.Hold(gctx, purchase.HoldParams{
				UserID: uuid.New(), EventID: ev.ID, SeatIDs: []uuid.UUID{seat}, IdempotencyKey: "k", CorrelationID: "outage",
			})
			return err
		})
	}
	require.NoError(t, g.Wait())
	// Each hold commits two rows: HoldCreated and PaymentAuthorizationRequested.
	const rows = 2 * holds
	require.Equal(t, int64(rows), unpublished(t, b.pool), "nothing can be published while NATS is down")
	require.Eventually(t, func() bool { return metric(t, reg, "boxoffice_outbox_backlog") == rows }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return metric(t, reg, "boxoffice_outbox_oldest_unpublished_age_seconds") > 0 }, 10*time.Second, 10*time.Millisecond)

	b.nats.Start(t)
	require.Eventually(t, func() bool { return unpublished(t, b.pool) == 0 }, time.Minute, 20*time.Millisecond)
	require.Equal(t, int64(0), claimed(t, b.pool))
	requireEachRowOnceInStream(t, b, rows)
	s, err := b.js.Stream(ctx, bus.Stream)
	require.NoError(t, err)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("ticketing.order."+outbox.TypeHoldCreated))
	require.NoError(t, err)
	require.EqualValues(t, holds, info.State.Subjects["ticketing.order."+outbox.TypeHoldCreated])
	require.Eventually(t, func() bool { return metric(t, reg, "boxoffice_outbox_backlog") == 0 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, run.stop())
}

// NATS going away in the middle of a drain — with batches published and
// their acks pending — loses nothing and duplicates nothing: unacknowledged
// rows are released and retried, and the stream drops any copy of a
// message it had stored before the connection broke.
func TestNATSStopsMidDrain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const n = 20000
	insertRows(t, b.pool, n)

	r, _ := b.newRelay(t, relay.Config{BatchSize: 500, AckTimeout: 2 * time.Second})
	stopped := make(chan struct{})
	var once sync.Once
	relay.SetAfterPublishFunc(r, func(context.Context, []uuid.UUID) error {
		once.Do(func() {
			go func() {
				b.nats.Stop()
				close(stopped)
			}()
		})
		return nil
	})
	run := start(t, ctx, r)
	<-stopped
	require.Positive(t, unpublished(t, b.pool))
	b.nats.Start(t)
	require.Eventually(t, func() bool { return unpublished(t, b.pool) == 0 }, time.Minute, 20*time.Millisecond)
	require.Equal(t, int64(0), claimed(t, b.pool))
	requireEachRowOnceInStream(t, b, n)
	require.NoError(t, run.stop())
}

// A row JetStream refuses (here: a subject of another stream, so the
// expected-stream check fails) is not lost and does not hold the others
// up: it is released for a slow retry while the rows around it publish.
func TestRejectedRowIsReleasedAndDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const n = 100
	insertRows(t, b.pool, n/2)
	poison := uuid.New()
	dbtest.Exec(t, b.pool, `INSERT INTO outbox (id, subject, event_type, aggregate_id, envelope)
		VALUES ($1, 'dlq.ticketing.elsewhere', 'HoldCreated', gen_random_uuid(), '{}')`, poison)
	insertRows(t, b.pool, n/2)

	r, reg := b.newRelay(t, relay.Config{BatchSize: 10})
	run := start(t, ctx, r)
	require.Eventually(t, func() bool { return unpublished(t, b.pool) == 1 }, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		return metric(t, reg, "boxoffice_relay_publish_errors_total") >= 1
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, run.stop())

	require.Equal(t, int64(1), dbtest.Count(t, b.pool,
		"SELECT count(*) FROM outbox WHERE id = $1 AND retry_at > now()", poison),
		"the rejected row waits for its retry")
	require.Zero(t, claimed(t, b.pool), "and no lease hides it")
	require.Equal(t, float64(n), metric(t, reg, "boxoffice_relay_published_total"))
	require.Equal(t, uint64(n), streamMsgs(t, b.js))
	_, rejected := streamMsgIDs(t, b.js)[poison]
	require.False(t, rejected)
}

// Two relays share an outbox and one of them dies mid-run with batches
// claimed and acknowledged but not marked. The survivor takes those rows
// over when their lease expires; every row ends up published, none stays
// claimed, and the stream holds exactly one message per row.
func TestRelayKilledMidBatchSurvivorFinishes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const n = 5000
	insertRows(t, b.pool, n)

	// The lease is short so the test is quick; the ack timeout below it
	// still leaves the race detector's slow server time to acknowledge.
	cfg := relay.Config{BatchSize: 250, MaxInFlight: 1000, Lease: 2 * time.Second, AckTimeout: 1500 * time.Millisecond}
	victim, _ := b.newRelay(t, cfg)
	var calls atomic.Int32
	var killedBatch []uuid.UUID
	relay.SetAfterPublishFunc(victim, func(_ context.Context, ids []uuid.UUID) error {
		if calls.Add(1) == 3 {
			killedBatch = ids
			return errCrash
		}
		return nil
	})
	survivor, reg := b.newRelay(t, cfg)
	victimRun := start(t, ctx, victim)
	survivorRun := start(t, ctx, survivor)

	require.ErrorIs(t, victimRun.result(), errCrash)
	require.NotEmpty(t, killedBatch)
	require.Eventually(t, func() bool { return unpublished(t, b.pool) == 0 }, time.Minute, 10*time.Millisecond)
	require.Equal(t, int64(0), claimed(t, b.pool))
	requireEachRowOnceInStream(t, b, n)
	require.GreaterOrEqual(t, metric(t, reg, "boxoffice_relay_duplicates_total"), float64(len(killedBatch)),
		"the survivor republished the killed batch and JetStream dropped the copies")
	require.NoError(t, survivorRun.stop())
}

// Three relays draining one outbox concurrently publish every row exactly
// once: serialized claims and leases keep their batches disjoint, so no row is published
// twice and none is a duplicate.
func TestConcurrentRelaysPublishEachRowOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const n = 10000
	insertRows(t, b.pool, n)

	var regs []*prometheus.Registry
	var runs []*running
	for range 3 {
		r, reg := b.newRelay(t, relay.Config{})
		regs = append(regs, reg)
		runs = append(runs, start(t, ctx, r))
	}
	require.Eventually(t, func() bool { return unpublished(t, b.pool) == 0 }, time.Minute, 10*time.Millisecond)
	for _, run := range runs {
		require.NoError(t, run.stop())
	}
	require.Equal(t, int64(0), claimed(t, b.pool))
	requireEachRowOnceInStream(t, b, n)
	var published float64
	for _, reg := range regs {
		published += metric(t, reg, "boxoffice_relay_published_total")
		require.Equal(t, float64(0), metric(t, reg, "boxoffice_relay_duplicates_total"))
		require.Equal(t, float64(0), metric(t, reg, "boxoffice_relay_publish_errors_total"))
	}
	require.Equal(t, float64(n), published)
}

// A relay with nothing to publish keeps polling the outbox without errors
// and returns nil when its context is canceled.
func TestIdleRelayStopsCleanly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, reg := b.newRelay(t, relay.Config{})
	acquired := b.pool.Stat().AcquireCount()
	run := start(t, t.Context(), r)
	// Only the relay uses the pool meanwhile: it is polling.
	require.Eventually(t, func() bool { return b.pool.Stat().AcquireCount() >= acquired+10 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, run.stop())
	require.Equal(t, float64(0), metric(t, reg, "boxoffice_relay_published_total"))
	require.Equal(t, float64(0), metric(t, reg, "boxoffice_relay_publish_errors_total"))
	require.Equal(t, uint64(0), streamMsgs(t, b.js))
	require.Equal(t, int64(0), claimed(t, b.pool))
}

// A relay stopped in the middle of a drain finishes the batches it already
// published and hands back every row it claimed but did not publish, so
// other relays take them at once rather than after the lease.
func TestShutdownReleasesClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 20000
	insertRows(t, b.pool, n)

	ctx, cancel := context.WithCancel(t.Context())
	r, reg := b.newRelay(t, relay.Config{BatchSize: 500})
	relay.SetAfterPublishFunc(r, func(context.Context, []uuid.UUID) error {
		cancel()
		return nil
	})
	require.NoError(t, start(t, ctx, r).result())

	published := n - unpublished(t, b.pool)
	require.Positive(t, published)
	require.Less(t, published, int64(n), "the relay stopped before the outbox was drained")
	require.Equal(t, float64(published), metric(t, reg, "boxoffice_relay_published_total"))
	require.Equal(t, int64(0), claimed(t, b.pool))
	require.Equal(t, int64(0), dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE retry_at > now()"),
		"released rows are claimable at once")
	require.Equal(t, uint64(published), streamMsgs(t, b.js), "only acknowledged rows were published")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cfg     relay.Config
		wantErr string
	}{
		{"ZeroValueUsesDefaults", relay.Config{}, ""},
		{"NegativeBatchSize", relay.Config{BatchSize: -1}, "BatchSize must not be negative"},
		{"NegativeIdleInterval", relay.Config{IdleInterval: -time.Second}, "IdleInterval must not be negative"},
		{"LeaseNotLongerThanAckTimeout", relay.Config{Lease: time.Second, AckTimeout: time.Second}, "must exceed AckTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
}

// Two relays in one process may share a registry: the second reuses the
// first one's collectors instead of failing to register.
func TestRelaysShareARegistry(t *testing.T) {
	t.Parallel()
	srv := natstest.New(t)
	nc, _ := srv.Connect(t)
	reg := prometheus.NewRegistry()
	for i := range 2 {
		_, err := relay.New(nil, nc, relay.Config{ID: fmt.Sprint("relay-", i), Registerer: reg})
		require.NoError(t, err)
	}
}
