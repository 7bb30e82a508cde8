package waitingroom

import (
	"context"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"boxoffice/domain/catalog"
	"boxoffice/domain/purchase"
	"boxoffice/platform/admission"
	"boxoffice/relay"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
	"boxoffice/testkit/natstest"
	"boxoffice/testkit/redistest"
)

func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func createEvent(t *testing.T, pool *pgxpool.Pool, seats int) catalog.Event {
	t.Helper()
	return fixture.NewEvent(t, pool, fixture.EventSpec{Name: "onsale", StartsAt: time.Now().Add(time.Hour), SeatsPerRow: seats}).Event
}

// Redis killed (SIGKILL) and restarted in the middle of an onsale: while
// it is down nobody joins or is admitted; when it is back the admitter
// resumes by itself, and every buyer ends up admitted exactly once, those
// admitted before the crash with the admission they had.
func TestRedisRestartMidOnsale(t *testing.T) {
	t.Parallel()
	const buyers = 2000
	srv := redistest.StartServer(t)
	rdb := srv.Client(t)
	pool := dbtest.New(t)
	ev := createEvent(t, pool, 10)
	logger := testLogger(t)
	room := NewRoom(RoomConfig{
		Store:         NewRedisStore(rdb, RedisStoreConfig{Prefix: "t:"}),
		Signer:        admission.NewSigner(admission.SignerConfig{Key: []byte("test-admission-key-0123456789abcdef01234567")}),
		Events:        catalog.New(pool),
		Onsales:       NewOnsales(pool),
		Controller:    NewController(ControllerConfig{Initial: 200, Logger: logger}),
		Limits:        Limits{PerUser: -1, PerIP: -1},
		AdmitInterval: 20 * time.Millisecond,
		Logger:        logger,
	})
	ctx := t.Context()
	// Paused while the crowd joins, so all of it queues.
	_, err := room.UpdateOnsale(ctx, ev.ID, func(s *Settings) { s.Paused = true })
	require.NoError(t, err)
	users := make([]uuid.UUID, buyers)
	for i := range users {
		users[i] = uuid.New()
		v, err := room.Join(ctx, users[i], ev.ID, "192.0.2.1")
		require.NoError(t, err)
		require.Equal(t, StatusQueued, v.Status)
	}
	_, err = room.UpdateOnsale(ctx, ev.ID, func(s *Settings) { s.Paused = false })
	require.NoError(t, err)
	const atOnce = 0

	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = room.Run(runCtx) })
	defer func() { stop(); wg.Wait() }()
	require.Eventually(t, func() bool { return counter(t, room) >= 300 }, 20*time.Second, 5*time.Millisecond)

	// What every buyer holds just before the crash (the admitter keeps
	// running meanwhile).
	before := map[uuid.UUID]uuid.UUID{}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for _, u := range users[:800] {
		g.Go(func() error {
			v, err := room.Poll(gctx, u, ev.ID, "192.0.2.1")
			if err != nil || v.Status != StatusAdmitted {
				return err
			}
			claims, err := room.cfg.Signer.Verify(v.Token, u, ev.ID, "default")
			mu.Lock()
			before[u] = claims.ID
			mu.Unlock()
			return err
		})
	}
	require.NoError(t, g.Wait())
	require.NotEmpty(t, before)
	srv.Kill()
	_, err = room.Join(ctx, uuid.New(), ev.ID, "192.0.2.1")
	require.ErrorIs(t, err, ErrUnavailable, "fail closed")
	require.ErrorIs(t, room.AdmitOnce(ctx), ErrUnavailable)
	admittedAtCrash := counter(t, room)
	require.Less(t, admittedAtCrash, float64(buyers-atOnce), "the crash came mid-onsale")

	srv.Restart(t)
	require.Eventually(t, func() bool {
		n, err := room.cfg.Store.QueueLength(ctx, ev.ID)
		return err == nil && n == 0
	}, 30*time.Second, 20*time.Millisecond, "admission resumes with no manual step")
	// The counter misses admissions whose reply the kill cut off (Redis
	// applied them, the admitter never heard); it never counts one twice.
	require.LessOrEqual(t, counter(t, room), float64(buyers-atOnce))
	t.Logf("admitted before the crash %d (seen by polls), counted by the admitter %.0f of %d", len(before), counter(t, room), buyers)
	jtis := map[uuid.UUID]bool{}
	for _, u := range users {
		v, err := room.Poll(ctx, u, ev.ID, "192.0.2.1")
		require.NoError(t, err)
		require.Equal(t, StatusAdmitted, v.Status)
		claims, err := room.cfg.Signer.Verify(v.Token, u, ev.ID, "default")
		require.NoError(t, err)
		require.False(t, jtis[claims.ID], "an admission handed out twice")
		jtis[claims.ID] = true
		if j, ok := before[u]; ok {
			require.Equal(t, j, claims.ID, "an admission from before the crash was replaced: admitted twice")
		}
	}
}

// With NATS stopped, holds' events wait in the outbox; the controller,
// reading the real outbox in PostgreSQL, cuts R within 5 seconds, and
// raises it again once NATS is back and the relay has drained the outbox.
func TestControllerFollowsOutboxAge(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	nats := natstest.New(t)
	nc, _ := nats.Connect(t)
	logger := testLogger(t)
	r, err := relay.New(pool, nc, relay.Config{Logger: logger, AckTimeout: time.Second})
	require.NoError(t, err)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() { _ = r.Run(ctx) })

	holds := NewLatencyWindow(10 * time.Second)
	c := NewController(ControllerConfig{
		Signals:  NewCellSignals(pool, holds, nil),
		Interval: 100 * time.Millisecond,
		Initial:  400, Increase: 5,
		Logger: logger,
	})
	wg.Go(func() { _ = c.Run(ctx) })
	require.Eventually(t, func() bool { return c.State().Reason == ReasonHealthy }, 5*time.Second, 10*time.Millisecond)

	ev := createEvent(t, pool, 10)
	svc := purchase.NewService(pool, logger, purchase.Config{})
	nats.Stop()
	start := time.Now()
	var seat uuid.UUID
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT id FROM seats WHERE event_id = $1 LIMIT 1", ev.ID).Scan(&seat))
	_, err = svc.Hold(t.Context(), purchase.HoldParams{
		UserID: uuid.New(), EventID: ev.ID, SeatIDs: []uuid.UUID{seat}, IdempotencyKey: "k2", CorrelationID: "c",
	})
	require.NoError(t, err)
	peak := c.Rate()
	require.Eventually(t, func() bool { return c.State().Reason == ReasonOutboxAge }, 5*time.Second, 10*time.Millisecond,
		"R is cut within 5 s of the outbox starting to age")
	cut := c.State()
	t.Logf("R %.0f -> %.0f after %s: %s", peak, cut.Rate, time.Since(start).Round(time.Millisecond), cut.Detail)
	require.Less(t, cut.Rate, peak)
	require.Eventually(t, func() bool { return c.Rate() < peak/4 }, 5*time.Second-time.Since(start), 10*time.Millisecond,
		"R keeps falling fast while the outbox ages")
	require.Equal(t, int64(2), dbtest.Count(t, pool, "SELECT count(*) FROM outbox"),
		"the hold's two events (HoldCreated, PaymentAuthorizationRequested) wait in the outbox")

	nats.Start(t)
	require.Eventually(t, func() bool { return c.State().Reason == ReasonHealthy }, 30*time.Second, 10*time.Millisecond,
		"healthy again once NATS is back")
	low := c.Rate()
	require.Eventually(t, func() bool { return c.Rate() > low+50 }, 10*time.Second, 10*time.Millisecond, "R rises again")
	require.Zero(t, dbtest.Count(t, pool, "SELECT count(*) FROM outbox"), "the relay drained the outbox")
}

// A breach on any signal cuts R at once, multiplicatively; health raises
// it additively, only while buyers wait, up to Max; unreadable signals
// count as a breach.
func TestControllerAIMD(t *testing.T) {
	t.Parallel()
	demand := true
	c := NewController(ControllerConfig{Initial: 100, Min: 10, Max: 130, Increase: 10, Decrease: 0.5, DemandFunc: func() bool { return demand }, Logger: testLogger(t)})
	ctx := t.Context()
	for _, tc := range []struct {
		s      Signals
		reason string
	}{
		{Signals{HoldP99: time.Second}, ReasonHoldP99},
		{Signals{PoolWait: time.Second}, ReasonPoolWait},
		{Signals{OutboxAge: time.Minute}, ReasonOutboxAge},
		{Signals{ConsumerPending: 1 << 20}, ReasonConsumerPending},
		{Signals{ActiveHolds: 1 << 20}, ReasonActiveHolds},
		{Signals{LockWaits: 100}, ReasonLockWaits},
		{Signals{Deadlocks: 1}, ReasonDeadlocks},
		{Signals{PublishRetries: 3}, ReasonPublishRetries},
		{Signals{ExpiryDelay: time.Minute}, ReasonExpiryDelay},
	} {
		c.state.Rate = 100
		c.Step(ctx, tc.s, nil)
		require.Equal(t, 50.0, c.Rate(), tc.reason)
		require.Equal(t, tc.reason, c.State().Reason)
	}
	c.Step(ctx, Signals{}, context.DeadlineExceeded)
	require.Equal(t, 25.0, c.Rate())
	require.Equal(t, ReasonSignalsUnavailable, c.State().Reason)
	c.state.Rate = 100
	c.Step(ctx, Signals{PoolWait: time.Second}, context.DeadlineExceeded)
	require.Equal(t, 50.0, c.Rate())
	require.Equal(t, ReasonPoolWait, c.State().Reason, "a signal that could be read names the cut")
	c.state.Rate = 25
	c.Step(ctx, Signals{}, context.DeadlineExceeded)
	c.Step(ctx, Signals{}, context.DeadlineExceeded)
	require.Equal(t, 10.0, c.Rate(), "never below Min")
	c.Step(ctx, Signals{}, nil)
	require.Equal(t, 20.0, c.Rate(), "additive increase")
	demand = false
	c.Step(ctx, Signals{}, nil)
	require.Equal(t, 20.0, c.Rate(), "no increase without demand")
	demand = true
	for range 20 {
		c.Step(ctx, Signals{}, nil)
	}
	require.Equal(t, 130.0, c.Rate(), "never above Max")
}

func counter(t *testing.T, r *Room) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, r.admitted.Write(&m))
	return m.GetCounter().GetValue()
}

// TestSharedLoadOutlivesItsCaller: the event and settings load is shared
// by every request waiting on it (singleflight), so it must not fail
// because the request that started it went away; before the fix, live
// buyers queued behind a departed one got 499s.
func TestSharedLoadOutlivesItsCaller(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ev := createEvent(t, pool, 10)
	room := NewRoom(RoomConfig{
		Store:      NewMemoryStore(),
		Signer:     admission.NewSigner(admission.SignerConfig{Key: []byte("test-admission-key-0123456789abcdef01234567")}),
		Events:     catalog.New(pool),
		Onsales:    NewOnsales(pool),
		Controller: NewController(ControllerConfig{Initial: 200, Logger: testLogger(t)}),
		Logger:     testLogger(t),
	})
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	got, err := room.event(gone, ev.ID)
	require.NoError(t, err, "the load ran to completion for everyone waiting on it")
	require.Equal(t, ev.ID, got.ID)
}

// A buyer whose admission was revoked is told so when polling or joining
// again: no token, the same answer holds give (they refuse it). Another
// process sharing the store learns it with the revocations.
func TestRevokedBuyerIsReportedRevoked(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ev := createEvent(t, pool, 10)
	stores(t, func(t *testing.T, s Store, _ *redis.Client) {
		newRoom := func() *Room {
			return NewRoom(RoomConfig{
				Store:  s,
				Signer: admission.NewSigner(admission.SignerConfig{Key: []byte("test-admission-key-0123456789abcdef01234567")}),
				Events: catalog.New(pool), Limits: Limits{PerUser: -1, PerIP: -1}, Logger: testLogger(t),
			})
		}
		room, peer := newRoom(), newRoom()
		ctx := t.Context()
		user, other := uuid.New(), uuid.New()
		for _, u := range []uuid.UUID{user, other} {
			v, err := room.Join(ctx, u, ev.ID, "192.0.2.1")
			require.NoError(t, err)
			require.Equal(t, StatusAdmitted, v.Status)
		}
		ok, err := room.RevokeBuyer(ctx, ev.ID, user)
		require.NoError(t, err)
		require.True(t, ok)

		for name, f := range map[string]func(context.Context, uuid.UUID, uuid.UUID, string) (View, error){"Poll": room.Poll, "Join": room.Join} {
			v, err := f(ctx, user, ev.ID, "192.0.2.1")
			require.NoError(t, err)
			require.Equal(t, StatusRevoked, v.Status, name)
			require.Empty(t, v.Token, "%s: no token for a revoked admission", name)
		}
		v, err := room.Poll(ctx, other, ev.ID, "192.0.2.1")
		require.NoError(t, err)
		require.Equal(t, StatusAdmitted, v.Status, "another buyer keeps their admission")
		require.NotEmpty(t, v.Token)

		require.NoError(t, peer.RefreshRevocations(ctx))
		v, err = peer.Poll(ctx, user, ev.ID, "192.0.2.1")
		require.NoError(t, err)
		require.Equal(t, StatusRevoked, v.Status, "another process sharing the store")
		require.Empty(t, v.Token)
	})
}

// While every seat is held nobody is admitted, neither at once on joining
// nor from the queue; when a seat is left again the admitter admits as
// many as there are seats left, no more.
func TestNoAdmissionWhileNoSeatIsLeft(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	stores(t, func(t *testing.T, s Store, _ *redis.Client) {
		ctx := t.Context()
		ev := createEvent(t, pool, 2)
		seats, err := catalog.New(pool).Seats(ctx, ev.ID)
		require.NoError(t, err)
		room := NewRoom(RoomConfig{
			Store:  s,
			Signer: admission.NewSigner(admission.SignerConfig{Key: []byte("test-admission-key-0123456789abcdef01234567")}),
			Events: catalog.New(pool), Limits: Limits{PerUser: -1, PerIP: -1}, Logger: testLogger(t),
			InventoryFunc: InventoryFrom(catalog.New(pool), 0),
		})
		svc := purchase.NewService(pool, testLogger(t), purchase.Config{HoldTTL: time.Hour})
		holder := uuid.New()
		hold, err := svc.Hold(ctx, purchase.HoldParams{
			UserID: holder, EventID: ev.ID, SeatIDs: []uuid.UUID{seats[0].ID, seats[1].ID}, IdempotencyKey: "k", CorrelationID: "test",
		})
		require.NoError(t, err)

		buyers := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
		for _, u := range buyers {
			v, err := room.Join(ctx, u, ev.ID, "192.0.2.1")
			require.NoError(t, err)
			require.Equal(t, StatusQueued, v.Status, "no seat is left: nobody is admitted at once")
		}
		got, err := room.AdmitEvent(ctx, ev.ID)
		require.NoError(t, err)
		require.Empty(t, got, "no seat is left: nobody is admitted from the queue")

		_, err = svc.Cancel(ctx, holder, hold.OrderID)
		require.NoError(t, err)
		got, err = room.AdmitEvent(ctx, ev.ID)
		require.NoError(t, err)
		require.Equal(t, buyers[:2], got, "two seats left: the first two are admitted, the third waits")
	})
}

// Sold out, and seats that come back (issue 17, item 7): while every seat
// is held nobody is admitted; when ten holds expire, ten queued buyers are
// admitted, in queue order, and no more however often the admitter runs,
// since each admission counts against the seats left for the claim
// window; once every seat is sold, queued buyers are told it is sold out
// and keep their place.
func TestSeatsThatComeBackAdmitAsManyBuyers(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	stores(t, func(t *testing.T, s Store, _ *redis.Client) {
		ctx := t.Context()
		const seatCount = 12
		ev := createEvent(t, pool, seatCount)
		seats, err := catalog.New(pool).Seats(ctx, ev.ID)
		require.NoError(t, err)
		room := NewRoom(RoomConfig{
			Store:  s,
			Signer: admission.NewSigner(admission.SignerConfig{Key: []byte("test-admission-key-0123456789abcdef01234567")}),
			Events: catalog.New(pool), Limits: Limits{PerUser: -1, PerIP: -1}, Logger: testLogger(t),
			Controller:    NewController(ControllerConfig{Initial: 1000, Logger: testLogger(t)}),
			InventoryFunc: InventoryFrom(catalog.New(pool), 0),
			ClaimWindow:   time.Hour,
		})
		svc := purchase.NewService(pool, testLogger(t), purchase.Config{HoldTTL: time.Hour})
		hold := func(seat uuid.UUID) purchase.Hold {
			h, err := svc.Hold(ctx, purchase.HoldParams{
				UserID: uuid.New(), EventID: ev.ID, SeatIDs: []uuid.UUID{seat}, IdempotencyKey: "k", CorrelationID: "test",
			})
			require.NoError(t, err)
			return h
		}
		var holds []purchase.Hold
		for _, seat := range seats {
			holds = append(holds, hold(seat.ID))
		}

		queued := make([]uuid.UUID, 30)
		for i := range queued {
			queued[i] = uuid.New()
			v, err := room.Join(ctx, queued[i], ev.ID, "192.0.2.1")
			require.NoError(t, err)
			require.Equal(t, StatusQueued, v.Status, "every seat is held: nobody is admitted at once")
			require.False(t, v.SoldOut, "held seats may come back: not sold out")
			require.Equal(t, MaxPollAfter, v.PollAfter, "every seat is held: the queue does not move, whatever R is")
			require.Zero(t, v.EstimatedWait)
		}
		got, err := room.AdmitEvent(ctx, ev.ID)
		require.NoError(t, err)
		require.Empty(t, got, "every seat is held: nobody is admitted from the queue")

		// Ten holds expire and the expirer gives their seats back.
		ids := make([]uuid.UUID, 10)
		for i := range ids {
			ids[i] = holds[i].HoldID
		}
		dbtest.Exec(t, pool, "UPDATE holds SET expires_at = now() - interval '1 second' WHERE id = ANY($1)", ids)
		n, err := purchase.NewExpirer(pool, purchase.ExpirerConfig{}).ExpireBatch(ctx)
		require.NoError(t, err)
		require.Equal(t, 10, n)

		var admitted []uuid.UUID
		for range 5 {
			got, err := room.AdmitEvent(ctx, ev.ID)
			require.NoError(t, err)
			admitted = append(admitted, got...)
		}
		require.Equal(t, queued[:10], admitted, "ten seats came back: the first ten queued buyers, once each")
		v, err := room.Poll(ctx, queued[10], ev.ID, "192.0.2.1")
		require.NoError(t, err)
		require.Equal(t, StatusQueued, v.Status)
		require.EqualValues(t, 1, v.Position, "the eleventh waits at the head")
		require.Equal(t, MinPollAfter, v.PollAfter, "seats are available: the head of the queue polls often")
		require.NotZero(t, v.EstimatedWait)
		v, err = room.Poll(ctx, queued[25], ev.ID, "192.0.2.1")
		require.NoError(t, err)
		require.EqualValues(t, 16, v.Position)
		require.Equal(t, MaxPollAfter, v.PollAfter, "15 buyers ahead, 10 seats left: this one waits for holds to end, whatever R is")
		require.Zero(t, v.EstimatedWait)

		// The admitted buyers hold the ten seats and every seat is
		// ticketed: the tickets own the seats, the holds let go of them.
		for _, seat := range seats[:10] {
			hold(seat.ID)
		}
		dbtest.Exec(t, pool, `INSERT INTO tickets (id, order_id, seat_id, event_id)
			SELECT gen_random_uuid(), h.order_id, hs.seat_id, s.event_id
			FROM hold_seats hs JOIN holds h ON h.id = hs.hold_id JOIN seats s ON s.id = hs.seat_id
			WHERE s.event_id = $1 AND hs.released_at IS NULL`, ev.ID)
		dbtest.Exec(t, pool, `UPDATE hold_seats hs SET released_at = now() FROM seats s
			WHERE s.id = hs.seat_id AND s.event_id = $1 AND hs.released_at IS NULL`, ev.ID)
		inv, err := catalog.New(pool).Inventory(ctx, ev.ID)
		require.NoError(t, err)
		require.Equal(t, catalog.Inventory{Seats: seatCount, Held: 0, Sold: seatCount}, inv)

		v, err = room.Poll(ctx, queued[10], ev.ID, "192.0.2.1")
		require.NoError(t, err)
		require.Equal(t, StatusQueued, v.Status, "a sold-out onsale keeps its waiting list")
		require.True(t, v.SoldOut, "nothing is available or held: sold out")
		v, err = room.Join(ctx, uuid.New(), ev.ID, "192.0.2.1")
		require.NoError(t, err)
		require.Equal(t, StatusQueued, v.Status)
		require.True(t, v.SoldOut, "a buyer who joins a sold-out onsale is told at once")
		got, err = room.AdmitEvent(ctx, ev.ID)
		require.NoError(t, err)
		require.Empty(t, got, "sold out: nobody is admitted")
	})
}

// One slow second of holds cuts R once, not at every reading for as long
// as the window remembers it: after a cut only the holds observed since
// count, and a new slow hold cuts again.
func TestControllerCutsOncePerSlowHolds(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	holds := NewLatencyWindow(10 * time.Second)
	signals := NewCellSignals(pool, holds, nil)
	c := NewController(ControllerConfig{Signals: signals, Initial: 100, Min: 1, Increase: 10, Logger: testLogger(t)})
	ctx := t.Context()
	// The pool's first connection is dialed inside the first reading, and
	// pgxpool counts the dial as an empty-pool acquire wait, which the
	// next reading would see as pool wait: on a loaded CI machine a dial
	// over 100 ms cut R for pool_wait there. Two readings before the test
	// leave that behind; every later one finds the connection idle.
	for range 2 {
		_, err := signals.ReadSignals(ctx)
		require.NoError(t, err)
	}
	step := func() {
		t.Helper()
		s, err := signals.ReadSignals(ctx)
		require.NoError(t, err)
		c.Step(ctx, s, nil)
	}
	for range 50 {
		holds.Observe(time.Second)
	}
	step()
	require.Equal(t, 50.0, c.Rate(), "slow holds cut R")
	require.Equal(t, ReasonHoldP99, c.State().Reason)
	step()
	require.Equal(t, 60.0, c.Rate(), "the same slow holds do not cut it again")
	holds.Observe(20 * time.Millisecond)
	step()
	require.Equal(t, 70.0, c.Rate(), "fast holds since the cut: healthy")
	holds.Observe(time.Second)
	step()
	require.Equal(t, 35.0, c.Rate(), "a slow hold after the cut cuts again")
}

// Goroutines kept from a CPU show as scheduling latency, a signal that
// cuts R although no handler measured anything slow.
//
// Not parallel: the latency histogram is the process's, so the quick
// scheduling events of the package's parallel tests (Redis clients,
// timers) outnumbered the spinners' waits and pulled its p99 under the
// bound on a CI run. Even run alone, other tests' leftovers (a Redis
// client redialing) add quick events: a spinner that ran until preempted
// gave one long wait per 10 ms time slice, 60 in the whole run, under 1 %
// of the events on one CI run (p99 229 µs). So each spinner yields after
// every chunk of work: every one of its many waits is the queue of the
// others' chunks, several milliseconds.
func TestSchedLatencySeesCPUQueueing(t *testing.T) {
	var l schedLatency
	l.p99SinceLast()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 * runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := 0; i < 2e6; i++ {
					_ = i * i
				}
				runtime.Gosched()
			}
		})
	}
	time.AfterFunc(300*time.Millisecond, func() { close(stop) })
	wg.Wait()
	p99 := l.p99SinceLast()
	t.Logf("scheduling latency p99 with %d spinning goroutines: %s", 8*runtime.GOMAXPROCS(0), p99)
	require.Greater(t, p99, 2*time.Millisecond, "runnable goroutines waited for a CPU")

	c := NewController(ControllerConfig{Initial: 100, Thresholds: Thresholds{SchedLatency: time.Millisecond}, Logger: testLogger(t)})
	c.Step(t.Context(), Signals{SchedLatency: p99}, nil)
	require.Equal(t, ReasonSchedLatency, c.State().Reason)
	require.Equal(t, 50.0, c.Rate())
}

// A reading whose database cannot answer in time still carries what this
// process measured itself: the controller cuts R for the slow holds it
// sees, not for a reading it could not make.
func TestCellSignalsKeepWhatThisProcessMeasuresWhenTheDatabaseCannotAnswer(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	holds := NewLatencyWindow(10 * time.Second)
	for range 100 {
		holds.Observe(2 * time.Second)
	}
	signals := NewCellSignals(pool, holds, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the database's reads fail at once, as a timed-out one does
	s, err := signals.ReadSignals(ctx)
	require.Error(t, err)
	require.Equal(t, 2*time.Second, s.HoldP99)

	c := NewController(ControllerConfig{Initial: 100, Logger: testLogger(t)})
	c.Step(t.Context(), s, err)
	require.Equal(t, ReasonHoldP99, c.State().Reason)
	require.Less(t, c.Rate(), 100.0)
}

// The signals docs/design/admission.md names beside outbox age are read from the cell's
// database as they happen: a hold left active past its expiry (the expiry
// worker behind), events waiting out a failed publish, a session waiting
// for a row lock, a deadlock; each cuts R with its own reason.
func TestCellSignalsReadLocksDeadlocksPublishErrorsAndExpiryDelay(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := t.Context()
	signals := NewCellSignals(pool, nil, nil)
	read := func() Signals {
		t.Helper()
		s, err := signals.ReadSignals(ctx)
		require.NoError(t, err)
		return s
	}
	cut := func(s Signals) string {
		c := NewController(ControllerConfig{Initial: 100, Logger: testLogger(t)})
		c.Step(ctx, s, nil)
		return c.State().Reason
	}
	quiet := read()
	require.Zero(t, quiet.ExpiryDelay)
	require.Zero(t, quiet.PublishRetries)
	require.Zero(t, quiet.LockWaits)
	require.Zero(t, quiet.Deadlocks, "the first reading sets the deadlock baseline")

	ev := createEvent(t, pool, 4)
	svc := purchase.NewService(pool, testLogger(t), purchase.Config{})
	var seat uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, "SELECT id FROM seats WHERE event_id = $1 LIMIT 1", ev.ID).Scan(&seat))
	held, err := svc.Hold(ctx, purchase.HoldParams{UserID: uuid.New(), EventID: ev.ID, SeatIDs: []uuid.UUID{seat}, IdempotencyKey: "k", CorrelationID: "c"})
	require.NoError(t, err)

	// The expiry worker is not running: the hold stays active past its expiry.
	_, err = pool.Exec(ctx, "UPDATE holds SET expires_at = now() - interval '30 seconds' WHERE order_id = $1", held.OrderID)
	require.NoError(t, err)
	s := read()
	require.GreaterOrEqual(t, s.ExpiryDelay, 30*time.Second)
	require.Equal(t, ReasonExpiryDelay, cut(Signals{ExpiryDelay: s.ExpiryDelay}))

	// The relay failed to publish the hold's events and released them for a retry.
	_, err = pool.Exec(ctx, "UPDATE outbox SET retry_at = now() + interval '1 minute'")
	require.NoError(t, err)
	s = read()
	require.Equal(t, int64(2), s.PublishRetries, "HoldCreated and PaymentAuthorizationRequested")
	require.Equal(t, ReasonPublishRetries, cut(Signals{PublishRetries: s.PublishRetries}))

	// One transaction holds the order row; another waits for it.
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx) //nolint:errcheck
	_, err = holder.Exec(ctx, "SELECT 1 FROM orders WHERE id = $1 FOR UPDATE", held.OrderID)
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() {
		_, err := pool.Exec(ctx, "UPDATE orders SET updated_at = now() WHERE id = $1", held.OrderID)
		waited <- err
	}()
	require.Eventually(t, func() bool { return read().LockWaits >= 1 }, 10*time.Second, 20*time.Millisecond, "the waiting session is seen")
	require.Equal(t, ReasonLockWaits, cut(Signals{LockWaits: 16}))
	require.NoError(t, holder.Rollback(ctx))
	require.NoError(t, <-waited)

	// Two transactions lock two rows in opposite orders: PostgreSQL kills one.
	var seats []uuid.UUID
	rows, err := pool.Query(ctx, "SELECT id FROM seats WHERE event_id = $1 ORDER BY id LIMIT 2", ev.ID)
	require.NoError(t, err)
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		seats = append(seats, id)
	}
	require.NoError(t, rows.Err())
	a, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer a.Rollback(ctx) //nolint:errcheck
	b, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer b.Rollback(ctx) //nolint:errcheck
	_, err = a.Exec(ctx, "SELECT 1 FROM seats WHERE id = $1 FOR UPDATE", seats[0])
	require.NoError(t, err)
	_, err = b.Exec(ctx, "SELECT 1 FROM seats WHERE id = $1 FOR UPDATE", seats[1])
	require.NoError(t, err)
	second := make(chan error, 1)
	go func() {
		_, err := a.Exec(ctx, "SELECT 1 FROM seats WHERE id = $1 FOR UPDATE", seats[1])
		second <- err
	}()
	require.Eventually(t, func() bool { return read().LockWaits >= 1 }, 10*time.Second, 20*time.Millisecond)
	_, errB := b.Exec(ctx, "SELECT 1 FROM seats WHERE id = $1 FOR UPDATE", seats[0])
	errA := <-second
	require.True(t, (errA == nil) != (errB == nil), "one of the two was chosen as the deadlock's victim: %v / %v", errA, errB)
	_ = a.Rollback(ctx)
	_ = b.Rollback(ctx)
	var deadlocks int64
	require.Eventually(t, func() bool { deadlocks += read().Deadlocks; return deadlocks >= 1 }, 10*time.Second, 50*time.Millisecond,
		"the deadlock reaches the database's statistics")
	require.Equal(t, ReasonDeadlocks, cut(Signals{Deadlocks: deadlocks}))
}

// Buyers queued for an event the catalog does not know (deleted, or
// another deployment's on a shared Redis) are not demand: R must not rise
// for them on an idle cell.
func TestQueueOfAnUnknownEventIsNoDemand(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	stores(t, func(t *testing.T, s Store, _ *redis.Client) {
		ctx := t.Context()
		room := NewRoom(RoomConfig{
			Store:  s,
			Signer: admission.NewSigner(admission.SignerConfig{Key: []byte("test-admission-key-0123456789abcdef01234567")}),
			Events: catalog.New(pool), Limits: Limits{PerUser: -1, PerIP: -1}, Logger: testLogger(t),
			// One admission at once, the rest queued.
			Controller: NewController(ControllerConfig{Initial: 0.001, Min: 0.001, Logger: testLogger(t)}),
		})
		stale := joinParams(uuid.New(), uuid.New(), PhaseOpen, time.Now())
		stale.Rate, stale.Burst = 0, 0 // queued, not admitted
		_, err := s.Join(ctx, stale)
		require.NoError(t, err)
		require.ErrorIs(t, room.AdmitOnce(ctx), ErrEventNotFound)
		require.False(t, room.HasDemand(), "nobody waits for an event that does not exist")

		ev := createEvent(t, pool, 4)
		for range 3 {
			_, err = room.Join(ctx, uuid.New(), ev.ID, "192.0.2.1")
			require.NoError(t, err)
		}
		_ = room.AdmitOnce(ctx)
		require.True(t, room.HasDemand(), "a known event with a queue is demand")
	})
}

// Two API processes share one waiting room: the one whose signals cut R
// cuts the admission of both (the cell admits at one R, not at each
// process's), and when it stops reporting the other admits at its own R
// again.
func TestProcessesShareTheLowestR(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	stores(t, func(t *testing.T, s Store, _ *redis.Client) {
		ctx := t.Context()
		ev := createEvent(t, pool, 1000)
		now := time.Now()
		clock := func() time.Time { return now }
		room := func(process string, rate float64) *Room {
			return NewRoom(RoomConfig{
				Store: s, Process: process, Now: clock,
				Signer:     admission.NewSigner(admission.SignerConfig{Key: []byte("test-admission-key-0123456789abcdef01234567")}),
				Events:     catalog.New(pool),
				Controller: NewController(ControllerConfig{Initial: rate, Logger: testLogger(t)}),
				Limits:     Limits{PerUser: -1, PerIP: -1}, Logger: testLogger(t),
			})
		}
		fast, slow := room("api-fast", 200), room("api-slow", 4)
		require.NoError(t, fast.ShareRate(ctx))
		require.NoError(t, slow.ShareRate(ctx))
		require.NoError(t, fast.ShareRate(ctx))
		require.InDelta(t, 4, fast.rate(Settings{}), 1e-9, "the slow process's R is the cell's")

		// The queue is behind a first burst: 4 admitted at once, the rest
		// queued; a pass of the fast process's admitter a second later
		// admits what R 4 allows, not R 200.
		for range 4 {
			v, err := fast.Join(ctx, uuid.New(), ev.ID, "192.0.2.1")
			require.NoError(t, err)
			require.Equal(t, StatusAdmitted, v.Status)
		}
		for range 50 {
			v, err := fast.Join(ctx, uuid.New(), ev.ID, "192.0.2.1")
			require.NoError(t, err)
			require.Equal(t, StatusQueued, v.Status, "the bucket of R 4 is empty")
		}
		now = now.Add(time.Second)
		require.NoError(t, slow.ShareRate(ctx))
		require.NoError(t, fast.ShareRate(ctx))
		got, err := fast.AdmitEvent(ctx, ev.ID)
		require.NoError(t, err)
		require.Len(t, got, 4, "one second at the cell's R of 4")

		// The slow process stops (no more reports): after the reports'
		// lifetime the fast one admits at its own R.
		now = now.Add(2 * time.Second)
		require.NoError(t, fast.ShareRate(ctx))
		require.InDelta(t, 200, fast.rate(Settings{}), 1e-9)
		got, err = fast.AdmitEvent(ctx, ev.ID)
		require.NoError(t, err)
		require.Len(t, got, 46, "the rest of the queue, within one second of R 200")
	})
}
