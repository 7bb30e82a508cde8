package waitingroom

import (
	"context"
	"math"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/redistest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// stores runs f against a RedisStore on the test Redis and a MemoryStore.
func stores(t *testing.T, f func(t *testing.T, s Store, rdb *redis.Client)) {
	t.Run("Redis", func(t *testing.T) {
		t.Parallel()
		rdb, prefix := redistest.New(t)
		f(t, NewRedisStore(rdb, RedisStoreConfig{Prefix: prefix}), rdb)
	})
	t.Run("Memory", func(t *testing.T) {
		t.Parallel()
		f(t, NewMemoryStore(), nil)
	})
}

func joinParams(ev, user uuid.UUID, phase Phase, now time.Time) JoinParams {
	return JoinParams{
		EventID: ev, UserID: user, IP: "192.0.2.1", Now: now, Phase: phase,
		Rate: 100, Burst: 100, TTL: 15 * time.Minute, JTI: uuid.New(), PreScore: preScore(),
	}
}

// joinAll joins users in order, pipelined on Redis.
func joinAll(t *testing.T, s Store, ps []JoinParams) []Entry {
	t.Helper()
	ctx := t.Context()
	if rs, ok := s.(*RedisStore); ok {
		out, err := rs.JoinMany(ctx, ps)
		require.NoError(t, err)
		return out
	}
	out := make([]Entry, 0, len(ps))
	for _, p := range ps {
		e, err := s.Join(ctx, p)
		require.NoError(t, err)
		out = append(out, e)
	}
	return out
}

// 100,000 queued buyers are admitted in queue order, none twice, while
// four admitters drain the queue at once.
func TestQueuedBuyersAdmittedInOrderNoneTwice(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s Store, rdb *redis.Client) {
		const n = 100_000
		ctx := t.Context()
		ev := uuid.New()
		now := time.Now()
		users := make([]uuid.UUID, n)
		ps := make([]JoinParams, n)
		for i := range users {
			users[i] = uuid.New()
			ps[i] = joinParams(ev, users[i], PhasePaused, now)
		}
		for i, e := range joinAll(t, s, ps) {
			require.Equal(t, StatusQueued, e.Status)
			require.EqualValues(t, i, e.Ahead, "arrival order")
		}
		qlen, err := s.QueueLength(ctx, ev)
		require.NoError(t, err)
		require.EqualValues(t, n, qlen)
		active, err := s.ActiveEvents(ctx)
		require.NoError(t, err)
		require.Contains(t, active, ev)

		order := make(map[uuid.UUID]int, n)
		for i, u := range users {
			order[u] = i
		}
		var (
			mu     sync.Mutex
			chunks [][]uuid.UUID
			wg     sync.WaitGroup
			tick   time.Duration
		)
		for range 4 {
			wg.Go(func() {
				for ctx.Err() == nil {
					mu.Lock()
					tick += 10 * time.Millisecond
					at := now.Add(tick)
					mu.Unlock()
					got, err := s.Admit(ctx, AdmitParams{EventID: ev, Now: at, Rate: 200_000, Burst: 2000, TTL: 15 * time.Minute, Max: 2000})
					if !assertNoError(t, err) {
						return
					}
					if len(got) == 0 {
						if l, _ := s.QueueLength(ctx, ev); l == 0 {
							return
						}
						continue
					}
					mu.Lock()
					chunks = append(chunks, got)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		// Each call admits a contiguous run of the queue; in the order of
		// their first buyers, the runs make up the whole queue once.
		sort.Slice(chunks, func(i, j int) bool { return order[chunks[i][0]] < order[chunks[j][0]] })
		var all []uuid.UUID
		for _, c := range chunks {
			all = append(all, c...)
		}
		require.Len(t, all, n, "every buyer admitted, none twice")
		for i, u := range all {
			if order[u] != i {
				require.Failf(t, "out of order", "position %d admitted buyer who joined %d-th", i, order[u])
			}
		}
		qlen, err = s.QueueLength(ctx, ev)
		require.NoError(t, err)
		require.Zero(t, qlen)
		active, err = s.ActiveEvents(ctx)
		require.NoError(t, err)
		require.NotContains(t, active, ev, "a drained event leaves the active set")

		// Every admission is recorded once, with its own jti; joining
		// again returns it instead of queueing anew.
		jtis := map[uuid.UUID]bool{}
		for _, u := range users[:1000] {
			e, err := s.Join(ctx, joinParams(ev, u, PhaseOpen, now.Add(time.Second)))
			require.NoError(t, err)
			require.Equal(t, StatusAdmitted, e.Status)
			require.False(t, jtis[e.Admission.JTI], "jti reused")
			jtis[e.Admission.JTI] = true
		}
		qlen, err = s.QueueLength(ctx, ev)
		require.NoError(t, err)
		require.Zero(t, qlen, "admitted buyers are not queued again")
		if rdb != nil {
			var keys []string
			iter := rdb.Scan(ctx, 0, "*"+ev.String()+"}:a:*", 10_000).Iterator()
			for iter.Next(ctx) {
				keys = append(keys, iter.Val())
			}
			require.NoError(t, iter.Err())
			require.Len(t, keys, n, "one admission record per buyer")
		}
	})
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

// Joining twice neither queues twice nor moves the buyer; an admitted buyer
// joining again gets the same admission.
func TestJoinIsIdempotent(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s Store, _ *redis.Client) {
		ctx := t.Context()
		ev, now := uuid.New(), time.Now()
		first, second := uuid.New(), uuid.New()

		p := joinParams(ev, first, PhaseOpen, now)
		p.Rate, p.Burst = 0.001, 1
		a1, err := s.Join(ctx, p)
		require.NoError(t, err)
		require.Equal(t, StatusAdmitted, a1.Status, "nobody queued, spare capacity: admitted at once")
		p.JTI = uuid.New()
		a2, err := s.Join(ctx, p)
		require.NoError(t, err)
		require.Equal(t, a1.Admission, a2.Admission, "the same admission")

		// An empty bucket queues the next buyer; joining again keeps the place.
		q := joinParams(ev, second, PhaseOpen, now)
		q.Rate, q.Burst = 0.001, 1
		e1, err := s.Join(ctx, q)
		require.NoError(t, err)
		require.Equal(t, StatusQueued, e1.Status)
		for range 3 {
			e, err := s.Join(ctx, q)
			require.NoError(t, err)
			require.Equal(t, e1, e)
		}
		n, err := s.QueueLength(ctx, ev)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)

		polled, err := s.Poll(ctx, joinParams(ev, uuid.New(), PhaseOpen, now))
		require.NoError(t, err)
		require.Equal(t, StatusNone, polled.Status, "polling does not join")
	})
}

// Buyers who join before the onsale opens are admitted in a uniformly
// random order, not their arrival order, and all before anyone who joined
// after the opening, who are served in arrival order.
func TestPreQueueShuffledFairly(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s Store, _ *redis.Client) {
		const early, late = 4000, 500
		ctx := t.Context()
		ev, now := uuid.New(), time.Now()
		var ps []JoinParams
		rank := map[uuid.UUID]int{}
		for i := range early + late {
			u := uuid.New()
			rank[u] = i
			phase := PhasePre
			if i >= early {
				phase = PhasePaused // after the opening, before admission resumes
			}
			ps = append(ps, joinParams(ev, u, phase, now))
		}
		joinAll(t, s, ps)
		var got []uuid.UUID
		for len(got) < early+late {
			batch, err := s.Admit(ctx, AdmitParams{EventID: ev, Now: now.Add(time.Duration(len(got)+1) * time.Second), Rate: 1e6, Burst: 1000, TTL: time.Hour, Max: 1000})
			require.NoError(t, err)
			require.NotEmpty(t, batch)
			got = append(got, batch...)
		}
		for i, u := range got[:early] {
			require.Less(t, rank[u], early, "position %d: a late joiner went before the pre-queue", i)
		}
		for i, u := range got[early:] {
			require.Equal(t, early+i, rank[u], "late joiners are served in arrival order")
		}
		// Spearman's rank correlation between arrival and admission order
		// in the pre-queue: about N(0, 1/sqrt(n-1)) = ±0.016 if shuffled,
		// 1 if served in arrival order.
		var d2 float64
		for i, u := range got[:early] {
			d := float64(i - rank[u])
			d2 += d * d
		}
		rho := 1 - 6*d2/(float64(early)*(float64(early)*float64(early)-1))
		require.Less(t, math.Abs(rho), 0.08, "admission order correlates with arrival order: rho=%.3f", rho)
		// And every tenth of the arrivals is about equally represented in
		// the first tenth admitted (chi-square, 9 degrees of freedom,
		// p = 0.0001 at 33.7).
		counts := make([]float64, 10)
		for _, u := range got[:early/10] {
			counts[rank[u]*10/early]++
		}
		var chi2 float64
		for _, c := range counts {
			exp := float64(early/10) / 10
			chi2 += (c - exp) * (c - exp) / exp
		}
		require.Less(t, chi2, 33.7, "first tenth admitted by arrival decile: %v", counts)
	})
}

// Per-user and per-address limits: over the limit, a request does nothing
// and says when to retry.
func TestRateLimits(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s Store, _ *redis.Client) {
		ctx := t.Context()
		ev := uuid.New()
		now := time.Unix(1_800_000_000, 250*int64(time.Millisecond))
		p := joinParams(ev, uuid.New(), PhasePaused, now)
		p.Limits = Limits{PerUser: 3}
		for range 3 {
			e, err := s.Poll(ctx, p)
			require.NoError(t, err)
			require.Equal(t, StatusNone, e.Status)
		}
		e, err := s.Join(ctx, p)
		require.NoError(t, err)
		require.Equal(t, StatusLimited, e.Status)
		require.Equal(t, 750*time.Millisecond, e.RetryAfter, "until the next one-second window")
		n, err := s.QueueLength(ctx, ev)
		require.NoError(t, err)
		require.Zero(t, n, "a limited join queues nobody")
		p.Now = now.Add(time.Second)
		e, err = s.Join(ctx, p)
		require.NoError(t, err)
		require.Equal(t, StatusQueued, e.Status, "the next window admits the request")

		// Per address: many buyers behind one address.
		ip := Limits{PerIP: 5}
		var limited int
		for range 8 {
			q := joinParams(ev, uuid.New(), PhasePaused, now.Add(2*time.Second))
			q.Limits = ip
			e, err := s.Join(ctx, q)
			require.NoError(t, err)
			if e.Status == StatusLimited {
				limited++
			}
		}
		require.Equal(t, 3, limited)
	})
}

// Each answer counts the buyer's requests of its one-second window, the
// refused one too, for the RateLimit header; another buyer's requests and
// the next window start again; with no per-buyer limit nothing is counted.
func TestRateLimitsCountTheBuyersRequests(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s Store, _ *redis.Client) {
		ctx := t.Context()
		ev := uuid.New()
		now := time.Unix(1_800_000_100, 100*int64(time.Millisecond))
		p := joinParams(ev, uuid.New(), PhasePaused, now)
		p.Limits = Limits{PerUser: 2}
		for want := 1; want <= 3; want++ {
			e, err := s.Join(ctx, p)
			require.NoError(t, err)
			require.Equal(t, want, e.Used, "request %d of the window", want)
		}
		other := joinParams(ev, uuid.New(), PhasePaused, now)
		other.Limits = p.Limits
		e, err := s.Poll(ctx, other)
		require.NoError(t, err)
		require.Equal(t, 1, e.Used, "another buyer has a budget of their own")
		p.Now = now.Add(time.Second)
		e, err = s.Poll(ctx, p)
		require.NoError(t, err)
		require.Equal(t, StatusQueued, e.Status)
		require.Equal(t, 1, e.Used, "the next window starts afresh")
		p.Limits = Limits{}
		e, err = s.Poll(ctx, p)
		require.NoError(t, err)
		require.Zero(t, e.Used, "no per-buyer limit, nothing counted")
	})
}

// Revocations outlive nothing: an expired one is dropped.
func TestRevocations(t *testing.T) {
	t.Parallel()
	stores(t, func(t *testing.T, s Store, _ *redis.Client) {
		ctx := t.Context()
		live, dead := uuid.New(), uuid.New()
		require.NoError(t, s.Revoke(ctx, live, time.Now().Add(time.Hour)))
		require.NoError(t, s.Revoke(ctx, dead, time.Now().Add(-time.Second)))
		got, err := s.Revoked(ctx, time.Now())
		require.NoError(t, err)
		require.Contains(t, got, live)
		require.NotContains(t, got, dead)
	})
}

func TestUnavailableWrapsRedisErrors(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	s := NewRedisStore(rdb, RedisStoreConfig{})
	_, err := s.Join(context.Background(), joinParams(uuid.New(), uuid.New(), PhaseOpen, time.Now()))
	require.ErrorIs(t, err, ErrUnavailable)
	require.True(t, strings.HasPrefix(err.Error(), "waiting room join"), err.Error())
}

// The cell's R is the lowest R reported within the TTL: a second process
// that cuts its R cuts the cell's; fractions survive the store (a Lua
// number would not); a process that stops reporting stops counting.
func TestShareRateIsTheLowestFreshReport(t *testing.T) {
	stores(t, func(t *testing.T, s Store, _ *redis.Client) {
		ctx := t.Context()
		t0 := time.Unix(1_800_000_000, 0)
		ttl := 1500 * time.Millisecond
		share := func(proc string, rate float64, at time.Duration) float64 {
			t.Helper()
			got, err := s.ShareRate(ctx, ShareRateParams{Process: proc, Rate: rate, Now: t0.Add(at), TTL: ttl})
			require.NoError(t, err)
			return got
		}
		require.InDelta(t, 100, share("api-1", 100, 0), 1e-9, "alone, a process's R is the cell's")
		require.InDelta(t, 37.5, share("api-2", 37.5, 100*time.Millisecond), 1e-9, "the lower report is the cell's")
		require.InDelta(t, 37.5, share("api-1", 120, 500*time.Millisecond), 1e-9, "api-2's cut still holds the cell")
		require.InDelta(t, 60, share("api-2", 60, time.Second), 1e-9, "api-2's newer report replaces its older one")
		require.InDelta(t, 130, share("api-1", 130, 3*time.Second), 1e-9, "api-2 stopped reporting: its R no longer counts")
	})
}
