package waitingroom

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
)

// MemoryStore keeps the waiting room in this process: what runs when
// REDIS_URL is unset (dev, single-process tests). It has the same
// semantics as RedisStore, but every process has its own queues, so it
// serves one API process only. The pre-queue is shuffled when the onsale
// opens: its members are drawn in the order of their random scores, ahead
// of everyone who joined later.
type MemoryStore struct {
	mu      sync.Mutex
	events  map[uuid.UUID]*memEvent
	revoked map[uuid.UUID]time.Time
	rates   map[string]sharedRate
}

type sharedRate struct {
	rate float64
	at   time.Time
}

type memEvent struct {
	pre      map[uuid.UUID]uint64 // pre-queue: random scores
	queue    []uuid.UUID          // arrival order; queue[head:] waits
	head     int
	index    map[uuid.UUID]int // position in queue
	admitted map[uuid.UUID]Admission
	tokens   float64
	tokensAt time.Time
	full     bool // bucket never used: starts full
	limits   map[string]int
	limitSec int64
	claims   []time.Time // admission times, oldest first (AdmitParams.Seats)
}

// claim records an admission at now and forgets those older than window.
func (e *memEvent) claim(now time.Time, window time.Duration) {
	e.trimClaims(now, window)
	if window > 0 {
		e.claims = append(e.claims, now)
	}
}

// trimClaims forgets the admissions older than window and returns how
// many are left.
func (e *memEvent) trimClaims(now time.Time, window time.Duration) int {
	i := 0
	for i < len(e.claims) && !e.claims[i].After(now.Add(-window)) {
		i++
	}
	e.claims = e.claims[i:]
	return len(e.claims)
}

// NewMemoryStore returns an empty in-process store.
func NewMemoryStore() *MemoryStore {
	return &MemoryStore{events: map[uuid.UUID]*memEvent{}, revoked: map[uuid.UUID]time.Time{}}
}

func (s *MemoryStore) event(id uuid.UUID) *memEvent {
	e := s.events[id]
	if e == nil {
		e = &memEvent{pre: map[uuid.UUID]uint64{}, index: map[uuid.UUID]int{},
			admitted: map[uuid.UUID]Admission{}, full: true, limits: map[string]int{}}
		s.events[id] = e
	}
	return e
}

func (e *memEvent) limited(key string, limit int, now time.Time) bool {
	if limit <= 0 {
		return false
	}
	if sec := now.Unix(); sec != e.limitSec {
		e.limitSec, e.limits = sec, map[string]int{}
	}
	e.limits[key]++
	return e.limits[key] > limit
}

// flush moves the pre-queue, in random-score order, ahead of the queue.
func (e *memEvent) flush() {
	if len(e.pre) == 0 {
		return
	}
	pre := make([]uuid.UUID, 0, len(e.pre))
	for u := range e.pre {
		pre = append(pre, u)
	}
	slices.SortFunc(pre, func(a, b uuid.UUID) int { return cmp.Compare(e.pre[a], e.pre[b]) })
	e.queue = append(pre, e.queue[e.head:]...)
	e.head = 0
	e.pre = map[uuid.UUID]uint64{}
	for i, u := range e.queue {
		e.index[u] = i
	}
}

func (e *memEvent) refill(now time.Time, rate, burst float64) float64 {
	if e.full {
		return burst
	}
	t := e.tokens
	if now.After(e.tokensAt) {
		t += now.Sub(e.tokensAt).Seconds() * rate
	}
	return min(t, burst)
}

func (e *memEvent) lookup(user uuid.UUID, now time.Time) (Entry, bool) {
	if a, ok := e.admitted[user]; ok {
		if now.Before(a.ExpiresAt) {
			return Entry{Status: StatusAdmitted, Admission: a}, true
		}
		delete(e.admitted, user)
	}
	if score, ok := e.pre[user]; ok {
		var ahead int64
		for _, s := range e.pre {
			if s < score {
				ahead++
			}
		}
		return Entry{Status: StatusQueued, Ahead: ahead}, true
	}
	if i, ok := e.index[user]; ok {
		return Entry{Status: StatusQueued, Ahead: int64(len(e.pre) + i - e.head)}, true
	}
	return Entry{}, false
}

func (s *MemoryStore) enter(p JoinParams, join bool) Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.enterLocked(p, join)
	if p.Limits.PerUser > 0 {
		got.Used = s.event(p.EventID).limits["u:"+p.UserID.String()]
	}
	return got
}

func (s *MemoryStore) enterLocked(p JoinParams, join bool) Entry {
	e := s.event(p.EventID)
	if e.limited("u:"+p.UserID.String(), p.Limits.PerUser, p.Now) || e.limited("ip:"+p.IP, p.Limits.PerIP, p.Now) {
		return Entry{Status: StatusLimited, RetryAfter: time.Duration(1000-p.Now.UnixMilli()%1000) * time.Millisecond}
	}
	if join && p.Phase != PhasePre {
		e.flush()
	}
	if got, ok := e.lookup(p.UserID, p.Now); ok {
		return got
	}
	if !join {
		return Entry{Status: StatusNone}
	}
	if p.Phase == PhaseOpen && len(e.queue) == e.head && (p.Seats <= 0 || p.Seats > e.trimClaims(p.Now, p.ClaimWindow)) {
		if t := e.refill(p.Now, p.Rate, p.Burst); t >= 1 {
			e.tokens, e.tokensAt, e.full = t-1, p.Now, false
			a := Admission{JTI: p.JTI, IssuedAt: p.Now, ExpiresAt: p.Now.Add(p.TTL)}
			e.admitted[p.UserID] = a
			e.claim(p.Now, p.ClaimWindow)
			return Entry{Status: StatusAdmitted, Admission: a}
		}
	}
	if p.Phase == PhasePre {
		e.pre[p.UserID] = p.PreScore
	} else {
		e.index[p.UserID] = len(e.queue)
		e.queue = append(e.queue, p.UserID)
	}
	got, _ := e.lookup(p.UserID, p.Now)
	return got
}

// Join implements Store.
func (s *MemoryStore) Join(_ context.Context, p JoinParams) (Entry, error) {
	return s.enter(p, true), nil
}

// Poll implements Store.
func (s *MemoryStore) Poll(_ context.Context, p JoinParams) (Entry, error) {
	return s.enter(p, false), nil
}

// Admit implements Store.
func (s *MemoryStore) Admit(_ context.Context, p AdmitParams) ([]uuid.UUID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.event(p.EventID)
	e.flush()
	t := e.refill(p.Now, p.Rate, p.Burst)
	limit := p.Max
	if n := e.trimClaims(p.Now, p.ClaimWindow); p.Seats > 0 {
		limit = min(limit, p.Seats-n)
	}
	var out []uuid.UUID
	for t >= 1 && len(out) < limit && e.head < len(e.queue) {
		u := e.queue[e.head]
		e.queue[e.head] = uuid.Nil
		e.head++
		delete(e.index, u)
		if a, ok := e.admitted[u]; ok && p.Now.Before(a.ExpiresAt) {
			continue
		}
		e.admitted[u] = Admission{JTI: uuid.New(), IssuedAt: p.Now, ExpiresAt: p.Now.Add(p.TTL)}
		e.claim(p.Now, p.ClaimWindow)
		out = append(out, u)
		t--
	}
	if e.head == len(e.queue) {
		e.queue, e.head = e.queue[:0], 0
	}
	e.tokens, e.tokensAt, e.full = t, p.Now, false
	return out, nil
}

// ActiveEvents implements Store.
func (s *MemoryStore) ActiveEvents(context.Context) ([]uuid.UUID, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []uuid.UUID
	for id, e := range s.events {
		if len(e.pre) > 0 || e.head < len(e.queue) {
			out = append(out, id)
		}
	}
	return out, nil
}

// QueueLength implements Store.
func (s *MemoryStore) QueueLength(_ context.Context, eventID uuid.UUID) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.event(eventID)
	return int64(len(e.pre) + len(e.queue) - e.head), nil
}

// Revoke implements Store.
func (s *MemoryStore) Revoke(_ context.Context, jti uuid.UUID, expiresAt time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked[jti] = expiresAt
	return nil
}

// Revoked implements Store.
func (s *MemoryStore) Revoked(_ context.Context, now time.Time) (map[uuid.UUID]time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[uuid.UUID]time.Time, len(s.revoked))
	for j, exp := range s.revoked {
		if exp.After(now) {
			out[j] = exp
		} else {
			delete(s.revoked, j)
		}
	}
	return out, nil
}

// ShareRate implements Store.
func (s *MemoryStore) ShareRate(_ context.Context, p ShareRateParams) (float64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rates == nil {
		s.rates = map[string]sharedRate{}
	}
	s.rates[p.Process] = sharedRate{rate: p.Rate, at: p.Now}
	low := p.Rate
	for proc, r := range s.rates {
		if p.Now.Sub(r.at) > p.TTL {
			delete(s.rates, proc)
			continue
		}
		low = min(low, r.rate)
	}
	return low, nil
}
