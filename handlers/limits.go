package handlers

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// The bounds on what one stranger can multiply (issue 14, R1, R4, R6).
// Each is kept in this process's memory: with several API processes behind
// a balancer a client gets up to the bound from each, which still caps
// what one client costs the database per process. A bound shared across
// processes would need a round trip to a shared store on every request.

// DefaultHoldsPerSecond and DefaultEventReadsPerSecond are the defaults of
// Config.HoldsPerSecond and Config.EventReadsPerSecond, and so of the
// settings BOXOFFICE_HOLD_RATE_LIMIT and BOXOFFICE_EVENT_READ_IP_LIMIT.
const (
	DefaultHoldsPerSecond      = 5
	DefaultEventReadsPerSecond = 200
)

// Defaults of the other bounds; see the Config fields of the same names.
const (
	defaultOrderStreamsPerOrder = 4
	defaultOrderStreamsPerUser  = 16
	// limiterMaxKeys bounds the memory of each keyed limiter.
	limiterMaxKeys = 65_536
	// streamRetryAfter is the Retry-After of a refused stream: streams
	// end on their own (final status, lifetime), not on a schedule.
	streamRetryAfter = 5 * time.Second
)

// limits holds every bound of one Handlers.
type limits struct {
	streams *streamSlots
	holds   *keyedLimiter[uuid.UUID]
	reads   *keyedLimiter[string]
}

func newLimits(cfg Config) *limits {
	l := &limits{streams: newStreamSlots(
		orDefault(cfg.OrderStreamsPerOrder, defaultOrderStreamsPerOrder),
		orDefault(cfg.OrderStreamsPerUser, defaultOrderStreamsPerUser),
		cfg.Registerer,
	)}
	if n := orDefault(cfg.HoldsPerSecond, DefaultHoldsPerSecond); n > 0 {
		l.holds = newKeyedLimiter[uuid.UUID](float64(n), orDefault(cfg.HoldBurst, 2*n))
	}
	if n := orDefault(cfg.EventReadsPerSecond, DefaultEventReadsPerSecond); n > 0 {
		l.reads = newKeyedLimiter[string](float64(n), n)
	}
	return l
}

// orDefault is v, or def when v is 0; negative (no bound) stays negative.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// rateLimited is the 429 problem of a request over one of the limits; it
// did nothing.
func rateLimited(detail string, wait time.Duration) error {
	return huma.ErrorWithHeaders(problem(http.StatusTooManyRequests, TypeRateLimited, detail), retryAfter(wait))
}

// streamSlots counts the order event streams open in this process, per
// buyer and per order, and refuses one over either cap before it starts.
type streamSlots struct {
	perOrder, perUser int // <= 0: no cap

	mu     sync.Mutex
	orders map[uuid.UUID]int
	users  map[uuid.UUID]int
	open   prometheus.Gauge
}

func newStreamSlots(perOrder, perUser int, reg prometheus.Registerer) *streamSlots {
	s := &streamSlots{
		perOrder: perOrder, perUser: perUser,
		orders: map[uuid.UUID]int{}, users: map[uuid.UUID]int{},
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "boxoffice_order_streams_open",
			Help: "Order event streams (GET /v1/orders/{orderId}/events) open in this process.",
		}),
	}
	if reg != nil {
		reg.MustRegister(s.open)
	}
	return s
}

// acquireUser takes one of the user's stream slots. The returned release
// gives it back and may be called any number of times; ok is false, and
// nothing is taken, when the user already has perUser streams open.
func (s *streamSlots) acquireUser(user uuid.UUID) (release func(), ok bool) {
	return s.acquire(s.users, user, s.perUser, false)
}

// acquireOrder takes one of the order's stream slots, counted in the open
// streams gauge, like acquireUser.
func (s *streamSlots) acquireOrder(order uuid.UUID) (release func(), ok bool) {
	return s.acquire(s.orders, order, s.perOrder, true)
}

func (s *streamSlots) acquire(m map[uuid.UUID]int, key uuid.UUID, limit int, gauge bool) (func(), bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if limit > 0 && m[key] >= limit {
		return nil, false
	}
	m[key]++ // the map holds only keys with open streams: bounded by them
	if gauge {
		s.open.Inc()
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if m[key]--; m[key] <= 0 {
				delete(m, key)
			}
			if gauge {
				s.open.Dec()
			}
		})
	}, true
}

// keyedLimiter is a token bucket per key (a buyer, a client address). Its
// memory is bounded: a key idle long enough for its bucket to refill is
// forgotten (a fresh bucket is the same), and at limiterMaxKeys keys in
// use at once every bucket is forgotten.
type keyedLimiter[K comparable] struct {
	limit rate.Limit
	burst int
	// idle is how long a bucket takes to refill from empty.
	idle time.Duration

	mu        sync.Mutex
	buckets   map[K]*bucket
	lastSweep time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

func newKeyedLimiter[K comparable](perSecond float64, burst int) *keyedLimiter[K] {
	burst = max(burst, 1)
	return &keyedLimiter[K]{
		limit: rate.Limit(perSecond), burst: burst,
		idle:    max(time.Second, time.Duration(float64(burst)/perSecond*float64(time.Second))),
		buckets: map[K]*bucket{},
	}
}

// allow takes a token of key's bucket. When there is none it takes
// nothing and returns how long until there is. A nil limiter allows
// everything.
func (l *keyedLimiter[K]) allow(key K, now time.Time) (wait time.Duration, ok bool) {
	if l == nil {
		return 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[key]
	if b == nil {
		l.sweep(now)
		b = &bucket{lim: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[key] = b
	}
	b.seen = now
	r := b.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d, false
	}
	return 0, true
}

// budget is what is left of one key's bucket after a request, for the
// RateLimit and RateLimit-Policy headers (the IETF httpapi draft's
// names): the policy is the bucket's size (q) and the seconds it takes to
// refill from empty (w); the state what is left now (r) and the seconds
// until the bucket is full again (t).
type budget struct {
	quota, window, remaining, reset int
}

// headers are the budget's RateLimit-Policy and RateLimit field values,
// for the policy named name; empty for a zero budget (no limit).
func (b budget) headers(name string) (policy, state string) {
	if b.quota == 0 {
		return "", ""
	}
	return fmt.Sprintf("%q;q=%d;w=%d", name, b.quota, b.window), fmt.Sprintf("%q;r=%d;t=%d", name, b.remaining, b.reset)
}

// allowBudget is allow, with what is left of key's bucket afterwards; a
// zero budget for a nil limiter.
func (l *keyedLimiter[K]) allowBudget(key K, now time.Time) (b budget, wait time.Duration, ok bool) {
	if l == nil {
		return budget{}, 0, true
	}
	wait, ok = l.allow(key, now)
	l.mu.Lock()
	tokens := float64(l.burst)
	if bk := l.buckets[key]; bk != nil {
		tokens = max(0, bk.lim.TokensAt(now))
	}
	l.mu.Unlock()
	seconds := func(d float64) int { return int(math.Ceil(d)) }
	return budget{
		quota:     l.burst,
		window:    seconds(float64(l.burst) / float64(l.limit)),
		remaining: int(math.Floor(tokens)),
		reset:     seconds((float64(l.burst) - tokens) / float64(l.limit)),
	}, wait, ok
}

// sweep forgets the buckets idle for a refill, at most once per refill
// time unless the map is full; with l.mu held.
func (l *keyedLimiter[K]) sweep(now time.Time) {
	full := len(l.buckets) >= limiterMaxKeys
	if !full && now.Sub(l.lastSweep) < l.idle {
		return
	}
	l.lastSweep = now
	for k, b := range l.buckets {
		if now.Sub(b.seen) >= l.idle {
			delete(l.buckets, k)
		}
	}
	if len(l.buckets) >= limiterMaxKeys {
		clear(l.buckets) // that many active keys: a flood; give each a fresh bucket
	}
}

// size is how many buckets l holds.
func (l *keyedLimiter[K]) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// clientAddress is the key of the per-address read limit: the connection's
// IP, and for IPv6 its /64, which one subscriber usually holds whole.
// Behind a proxy this is the proxy's address: put the limit at the proxy
// and set EventReadsPerSecond to -1.
func clientAddress(remoteAddr string) string {
	host := remoteAddr
	if h, _, err := net.SplitHostPort(remoteAddr); err == nil {
		host = h
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return host
	}
	if ip.To4() == nil {
		return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
	}
	return ip.String()
}
