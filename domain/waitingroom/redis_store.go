package waitingroom

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// RedisStore keeps the waiting room in Redis. Each operation is one Lua
// script, so it is atomic and costs one round trip. Keys are namespaced by
// a prefix and, per event, share the hash tag {eventID}; every key carries
// a TTL, so an event's waiting room disappears a day after its last join.
//
// Key layout, with p the prefix and e the event id:
//
//	p wr:{e}:q          sorted set: the queue, member user id, score order
//	p wr:{e}:seq        arrival counter
//	p wr:{e}:b          token bucket: t (tokens), ts (ms)
//	p wr:{e}:a:<user>   the buyer's admission "jti|iat_ms|exp_ms", TTL = its life
//	p wr:{e}:rl:u:<user>:<s>, rl:ip:<ip>:<s>   one-second rate-limit windows
//	p wr:active         set of events with someone queued
//	p wr:revoked        sorted set: revoked jti, score = expiry (unix ms)
//
// The Admit script writes admission keys it derives from the prefix rather
// than declaring them, so it needs a standalone (or Sentinel-managed) Redis,
// not Redis Cluster. Run Redis with appendonly yes: an admission that is
// acknowledged and then lost to a crash can be handed out again after the
// restart.
//
// Joins and polls of concurrent requests are sent to Redis together: a few
// workers each take every request waiting and send them as one pipeline,
// so under load a round trip (two system calls on each side) serves many
// requests, and with one request waiting nothing is delayed.
type RedisStore struct {
	rdb    redis.UniversalClient
	prefix string

	calls     chan *call
	startOnce sync.Once
}

// call is one join or poll waiting for a batch.
type call struct {
	keys []string
	args []any
	res  []any
	err  error
	done chan struct{}
}

// batchWorkers pipelines run at once; batchMax requests go in one.
const (
	batchWorkers = 4
	batchMax     = 256
)

// RedisStoreConfig configures NewRedisStore.
type RedisStoreConfig struct {
	// Prefix namespaces every key. Defaults to "boxoffice:".
	Prefix string
}

// NewRedisStore returns a store on rdb.
func NewRedisStore(rdb redis.UniversalClient, cfg RedisStoreConfig) *RedisStore {
	if cfg.Prefix == "" {
		cfg.Prefix = "boxoffice:"
	}
	return &RedisStore{rdb: rdb, prefix: cfg.Prefix, calls: make(chan *call, 4096)}
}

// batch sends the waiting calls to Redis in pipelines, forever: the workers
// block on an empty channel and cost nothing when idle.
func (s *RedisStore) batch() {
	batch := make([]*call, 0, batchMax)
	cmds := make([]*redis.Cmd, 0, batchMax)
	for c := range s.calls {
		batch = append(batch[:0], c)
	drain:
		for len(batch) < batchMax {
			select {
			case c := <-s.calls:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		pipe := s.rdb.Pipeline()
		cmds = cmds[:0]
		for _, c := range batch {
			cmds = append(cmds, joinScript.EvalSha(ctx, pipe, c.keys, c.args...))
		}
		_, _ = pipe.Exec(ctx)
		for i, c := range batch {
			c.res, c.err = cmds[i].Slice()
			if c.err != nil && redis.HasErrorPrefix(c.err, "NOSCRIPT") {
				// Redis restarted and forgot the script: Run loads it.
				c.res, c.err = joinScript.Run(ctx, s.rdb, c.keys, c.args...).Slice()
			}
			close(c.done)
		}
		cancel()
	}
}

// exec runs the join script in the next batch.
func (s *RedisStore) exec(ctx context.Context, keys []string, args []any) ([]any, error) {
	s.startOnce.Do(func() {
		for range batchWorkers {
			go s.batch()
		}
	})
	c := &call{keys: keys, args: args, done: make(chan struct{})}
	select {
	case s.calls <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case <-c.done:
		return c.res, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *RedisStore) eventKey(eventID uuid.UUID, suffix string) string {
	return s.prefix + "wr:{" + eventID.String() + "}:" + suffix
}

// The scripts' shared helpers: one-second rate-limit windows and the token
// bucket, refilled at rate per second up to burst, starting full.
const luaHelpers = `
local function limited(key, limit)
  if limit <= 0 then return false end
  local n = redis.call('INCR', key)
  if n == 1 then redis.call('PEXPIRE', key, 2000) end
  return n > limit
end
local function refill(key, now, rate, burst)
  local v = redis.call('HMGET', key, 't', 'ts')
  local t, ts = tonumber(v[1]), tonumber(v[2])
  if not t then return burst end
  if now > ts then t = t + (now - ts) * rate / 1000 end
  if t > burst then t = burst end
  return t
end
local function save(key, t, now)
  redis.call('HSET', key, 't', string.format('%.6f', t), 'ts', string.format('%.0f', now))
  redis.call('PEXPIRE', key, 86400000)
end
local function claim(key, user, now, window)
  if window <= 0 then return end
  redis.call('ZADD', key, now, user)
  redis.call('PEXPIRE', key, window)
end
`

// joinScript: KEYS q, seq, b, a:user, rl:u, rl:ip, active, claims.
// ARGV user, now_ms, phase, rate, burst, jti, ttl_ms, user_limit, ip_limit,
// pre_score, event_id, join (1) or poll (0), claim window ms, seats (0: no
// bound; else admitted at once only while seats exceed the window's
// admissions).
//
// Every reply's third element is how many requests the buyer made in this
// second's window, this one included (0 with no per-buyer limit): the
// RateLimit header's budget.
var joinScript = redis.NewScript(luaHelpers + `
local now = tonumber(ARGV[2])
local used = 0
local function enter()
  local ulimit = tonumber(ARGV[8])
  if ulimit > 0 then
    used = redis.call('INCR', KEYS[5])
    if used == 1 then redis.call('PEXPIRE', KEYS[5], 2000) end
  end
  if used > ulimit and ulimit > 0 or limited(KEYS[6], tonumber(ARGV[9])) then
    return {'rate_limited', 1000 - (now % 1000)}
  end
local rec = redis.call('GET', KEYS[4])
if rec then return {'admitted', rec} end
local rank = redis.call('ZRANK', KEYS[1], ARGV[1])
if rank then return {'queued', rank} end
if ARGV[12] ~= '1' then return {'none'} end
local seats, window = tonumber(ARGV[14]), tonumber(ARGV[13])
local room = true
if seats > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[8], '-inf', now - window)
  room = seats > redis.call('ZCARD', KEYS[8])
end
if room and ARGV[3] == 'open' and redis.call('ZCARD', KEYS[1]) == 0 then
  local rate, burst = tonumber(ARGV[4]), tonumber(ARGV[5])
  local t = refill(KEYS[3], now, rate, burst)
  if t >= 1 then
    local ttl = tonumber(ARGV[7])
    rec = ARGV[6] .. '|' .. string.format('%.0f', now) .. '|' .. string.format('%.0f', now + ttl)
    redis.call('SET', KEYS[4], rec, 'PX', ttl)
    save(KEYS[3], t - 1, now)
    claim(KEYS[8], ARGV[1], now, window)
    return {'admitted', rec}
  end
end
local score
if ARGV[3] == 'scheduled' then
  score = ARGV[10]
else
  score = string.format('%.0f', 4503599627370496 + redis.call('INCR', KEYS[2]))
  redis.call('PEXPIRE', KEYS[2], 86400000)
end
redis.call('ZADD', KEYS[1], score, ARGV[1])
redis.call('PEXPIRE', KEYS[1], 86400000)
redis.call('SADD', KEYS[7], ARGV[11])
return {'queued', redis.call('ZRANK', KEYS[1], ARGV[1])}
end
local reply = enter()
if #reply < 2 then reply[2] = 0 end
reply[3] = used
return reply
`)

// admitScript: KEYS q, b, active, claims. ARGV now_ms, rate, burst, max,
// ttl_ms, jti_base (a UUID), admission key prefix, event_id, seats (0: no
// bound), claim window ms. Pops up to the bucket's whole tokens (and,
// when seats is positive, at most seats less the admissions of the
// window) from the head of the queue and records an admission for each
// popped buyer who has none (never twice).
var admitScript = redis.NewScript(luaHelpers + `
local now, rate, burst, max, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local seats, window = tonumber(ARGV[9]), tonumber(ARGV[10])
local t = refill(KEYS[2], now, rate, burst)
local n = math.floor(t)
if n > max then n = max end
if window > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now - window) end
if seats > 0 then
  local left = seats - redis.call('ZCARD', KEYS[4])
  if n > left then n = left end
end
local out = {}
if n >= 1 then
  local popped = redis.call('ZPOPMIN', KEYS[1], n)
  local base = string.sub(ARGV[6], 1, 28)
  local iat, exp = string.format('%.0f', now), string.format('%.0f', now + ttl)
  for k = 1, #popped, 2 do
    local akey = ARGV[7] .. popped[k]
    if redis.call('EXISTS', akey) == 0 then
      redis.call('SET', akey, base .. string.format('%08x', #out + 1) .. '|' .. iat .. '|' .. exp, 'PX', ttl)
      claim(KEYS[4], popped[k], now, window)
      out[#out + 1] = popped[k]
    end
  end
  t = t - #out
end
save(KEYS[2], t, now)
if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('SREM', KEYS[3], ARGV[8]) end
return out
`)

// shareRateScript: KEYS rates (a hash: process → "rate:at_ms"). ARGV
// process, rate, now_ms, ttl_ms. Records the process's R, forgets reports
// older than ttl, and returns the lowest R left as a string (a Lua number
// would come back truncated to an integer).
var shareRateScript = redis.NewScript(`
local now, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ARGV[3])
redis.call('PEXPIRE', KEYS[1], ttl * 10)
local low = tonumber(ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local rate, at = string.match(all[i + 1], '^([^:]+):(%-?%d+)$')
  rate, at = tonumber(rate), tonumber(at)
  if rate == nil or at == nil or now - at > ttl then
    redis.call('HDEL', KEYS[1], all[i])
  elseif rate < low then
    low = rate
  end
end
return tostring(low)
`)

// Scripts returns the Lua scripts, for callers that pipeline them (they
// must be loaded first: a pipeline cannot fall back from EVALSHA to EVAL).
func (s *RedisStore) loadScripts(ctx context.Context) error {
	for _, sc := range []*redis.Script{joinScript, admitScript, shareRateScript} {
		if err := sc.Load(ctx, s.rdb).Err(); err != nil {
			return unavailable("load scripts", err)
		}
	}
	return nil
}

func (s *RedisStore) joinArgs(p JoinParams, join bool) ([]string, []any) {
	sec := strconv.FormatInt(p.Now.Unix(), 10)
	user := p.UserID.String()
	ev := s.prefix + "wr:{" + p.EventID.String() + "}:" // eventKey's prefix, built once
	keys := []string{
		ev + "q", ev + "seq", ev + "b", ev + "a:" + user,
		ev + "rl:u:" + user + ":" + sec, ev + "rl:ip:" + p.IP + ":" + sec,
		s.prefix + "wr:active", ev + "claims",
	}
	j := "0"
	if join {
		j = "1"
	}
	args := []any{user, p.Now.UnixMilli(), string(p.Phase), p.Rate, p.Burst, p.JTI.String(), p.TTL.Milliseconds(),
		p.Limits.PerUser, p.Limits.PerIP, p.PreScore, p.EventID.String(), j, p.ClaimWindow.Milliseconds(), p.Seats}
	return keys, args
}

// Join implements Store.
func (s *RedisStore) Join(ctx context.Context, p JoinParams) (Entry, error) {
	return s.enter(ctx, p, true, "join")
}

// Poll implements Store.
func (s *RedisStore) Poll(ctx context.Context, p JoinParams) (Entry, error) {
	return s.enter(ctx, p, false, "poll")
}

// enter runs the join script for p, queueing the buyer when join is set
// (Join) or only reading where they are (Poll); op names the call in its
// unavailable error.
func (s *RedisStore) enter(ctx context.Context, p JoinParams, join bool, op string) (Entry, error) {
	keys, args := s.joinArgs(p, join)
	res, err := s.exec(ctx, keys, args)
	if err != nil {
		return Entry{}, unavailable(op, err)
	}
	return parseEntry(res)
}

// JoinMany joins many buyers in pipelined batches: for loading a queue
// quickly (tests, benchmarks). It stops at the first error.
func (s *RedisStore) JoinMany(ctx context.Context, ps []JoinParams) ([]Entry, error) {
	if err := s.loadScripts(ctx); err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(ps))
	for start := 0; start < len(ps); start += 1000 {
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.Cmd, 0, 1000)
		for _, p := range ps[start:min(start+1000, len(ps))] {
			keys, args := s.joinArgs(p, true)
			cmds = append(cmds, joinScript.EvalSha(ctx, pipe, keys, args...))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return out, unavailable("join batch", err)
		}
		for _, c := range cmds {
			res, err := c.Slice()
			if err != nil {
				return out, unavailable("join batch", err)
			}
			e, err := parseEntry(res)
			if err != nil {
				return out, err
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// Admit implements Store.
func (s *RedisStore) Admit(ctx context.Context, p AdmitParams) ([]uuid.UUID, error) {
	keys := []string{s.eventKey(p.EventID, "q"), s.eventKey(p.EventID, "b"), s.prefix + "wr:active", s.eventKey(p.EventID, "claims")}
	res, err := admitScript.Run(ctx, s.rdb, keys, p.Now.UnixMilli(), p.Rate, p.Burst, p.Max, p.TTL.Milliseconds(),
		uuid.NewString(), s.eventKey(p.EventID, "a:"), p.EventID.String(), p.Seats, p.ClaimWindow.Milliseconds()).StringSlice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, unavailable("admit", err)
	}
	users := make([]uuid.UUID, 0, len(res))
	for _, r := range res {
		u, err := uuid.Parse(r)
		if err != nil {
			return users, fmt.Errorf("admit: queued member %q is not a user id: %w", r, err)
		}
		users = append(users, u)
	}
	return users, nil
}

// ActiveEvents implements Store.
func (s *RedisStore) ActiveEvents(ctx context.Context) ([]uuid.UUID, error) {
	ids, err := s.rdb.SMembers(ctx, s.prefix+"wr:active").Result()
	if err != nil {
		return nil, unavailable("active events", err)
	}
	out := make([]uuid.UUID, 0, len(ids))
	for _, id := range ids {
		if u, err := uuid.Parse(id); err == nil {
			out = append(out, u)
		}
	}
	return out, nil
}

// QueueLength implements Store.
func (s *RedisStore) QueueLength(ctx context.Context, eventID uuid.UUID) (int64, error) {
	n, err := s.rdb.ZCard(ctx, s.eventKey(eventID, "q")).Result()
	if err != nil {
		return 0, unavailable("queue length", err)
	}
	return n, nil
}

// Revoke implements Store.
func (s *RedisStore) Revoke(ctx context.Context, jti uuid.UUID, expiresAt time.Time) error {
	key := s.prefix + "wr:revoked"
	pipe := s.rdb.TxPipeline()
	pipe.ZAdd(ctx, key, redis.Z{Score: float64(expiresAt.UnixMilli()), Member: jti.String()})
	pipe.ZRemRangeByScore(ctx, key, "-inf", strconv.FormatInt(time.Now().UnixMilli(), 10))
	if _, err := pipe.Exec(ctx); err != nil {
		return unavailable("revoke", err)
	}
	return nil
}

// Revoked implements Store.
func (s *RedisStore) Revoked(ctx context.Context, now time.Time) (map[uuid.UUID]time.Time, error) {
	zs, err := s.rdb.ZRangeByScoreWithScores(ctx, s.prefix+"wr:revoked", &redis.ZRangeBy{
		Min: "(" + strconv.FormatInt(now.UnixMilli(), 10), Max: "+inf",
	}).Result()
	if err != nil {
		return nil, unavailable("revoked", err)
	}
	out := make(map[uuid.UUID]time.Time, len(zs))
	for _, z := range zs {
		if u, err := uuid.Parse(fmt.Sprint(z.Member)); err == nil {
			out[u] = time.UnixMilli(int64(z.Score))
		}
	}
	return out, nil
}

func parseEntry(res []any) (Entry, error) {
	if len(res) == 0 {
		return Entry{}, errors.New("waiting room script: empty reply")
	}
	status, _ := res[0].(string)
	var used int64
	if len(res) > 2 {
		used, _ = res[2].(int64)
	}
	e, err := parseReply(Status(status), res)
	e.Used = int(used)
	return e, err
}

func parseReply(status Status, res []any) (Entry, error) {
	switch status {
	case StatusNone:
		return Entry{Status: StatusNone}, nil
	case StatusLimited:
		ms, _ := res[1].(int64)
		return Entry{Status: StatusLimited, RetryAfter: time.Duration(ms) * time.Millisecond}, nil
	case StatusQueued:
		rank, _ := res[1].(int64)
		return Entry{Status: StatusQueued, Ahead: rank}, nil
	case StatusAdmitted:
		rec, _ := res[1].(string)
		a, err := parseAdmission(rec)
		return Entry{Status: StatusAdmitted, Admission: a}, err
	}
	return Entry{}, fmt.Errorf("waiting room script: unexpected reply %v", res)
}

func parseAdmission(rec string) (Admission, error) {
	parts := strings.Split(rec, "|")
	if len(parts) != 3 {
		return Admission{}, fmt.Errorf("admission record %q: want jti|iat|exp", rec)
	}
	jti, err := uuid.Parse(parts[0])
	if err != nil {
		return Admission{}, fmt.Errorf("admission record: jti: %w", err)
	}
	iat, err1 := strconv.ParseInt(parts[1], 10, 64)
	exp, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return Admission{}, fmt.Errorf("admission record: times: %w", err)
	}
	return Admission{JTI: jti, IssuedAt: time.UnixMilli(iat), ExpiresAt: time.UnixMilli(exp)}, nil
}

// unavailable wraps a Redis error. Connection failures, timeouts and a
// Redis that is loading or read-only are ErrUnavailable; a context error is
// returned as is.
func unavailable(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) && !isNetErr(err) {
		return fmt.Errorf("waiting room %s: %w", op, err)
	}
	return fmt.Errorf("waiting room %s: %w: %w", op, ErrUnavailable, err)
}

func isNetErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

// ShareRate implements Store.
func (s *RedisStore) ShareRate(ctx context.Context, p ShareRateParams) (float64, error) {
	res, err := shareRateScript.Run(ctx, s.rdb, []string{s.prefix + "wr:rates"}, p.Process,
		strconv.FormatFloat(p.Rate, 'f', -1, 64), p.Now.UnixMilli(), p.TTL.Milliseconds()).Text()
	if err != nil {
		return 0, unavailable("share rate", err)
	}
	low, err := strconv.ParseFloat(res, 64)
	if err != nil {
		return 0, fmt.Errorf("share rate: %q is not a rate: %w", res, err)
	}
	return low, nil
}
