package handlers_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/catalog"
	"boxoffice/domain/cells"
	"boxoffice/domain/purchase"
	"boxoffice/domain/waitingroom"
	"boxoffice/domain/webhooks"
	"boxoffice/handlers"
	"boxoffice/platform/admission"
	"boxoffice/platform/auth"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/redistest"
)

// roomBundle is the API on real PostgreSQL with a waiting room on real
// Redis.
type roomBundle struct {
	*testBundle
	room   *waitingroom.Room
	rdb    *redis.Client
	prefix string
}

type roomOpts struct {
	rdb    *redis.Client
	prefix string
	rate   float64
	limits waitingroom.Limits
	holds  *waitingroom.LatencyWindow
	// secrets gives the cell its webhook secret keys, which seal the
	// answers kept for Idempotency-Key retries that show a secret once.
	secrets bool
	// reg, when set, receives the room's metrics.
	reg *prometheus.Registry
}

func setupRoom(t *testing.T, o roomOpts) *roomBundle {
	t.Helper()
	if o.rdb == nil {
		o.rdb, o.prefix = redistest.New(t)
	}
	pool := dbtest.New(t)
	logs := testkit.NewLog(t)
	logger := logs.Logger
	signer := admission.NewSigner(admission.SignerConfig{Key: admissionKey})
	var reg prometheus.Registerer
	if o.reg != nil {
		reg = o.reg
	}
	room := waitingroom.NewRoom(waitingroom.RoomConfig{
		Registerer:  reg,
		Store:       waitingroom.NewRedisStore(o.rdb, waitingroom.RedisStoreConfig{Prefix: o.prefix}),
		Signer:      signer,
		Events:      catalog.New(pool),
		Onsales:     waitingroom.NewOnsales(pool),
		Controller:  waitingroom.NewController(waitingroom.ControllerConfig{Initial: o.rate, Logger: logger}),
		Limits:      o.limits,
		HoldLatency: o.holds,
		Logger:      logger,
		// Tests change settings through this process; a short TTL only
		// matters for the admitter's view.
		SettingsTTL:   10 * time.Millisecond,
		AdmitInterval: 20 * time.Millisecond,
	})
	cell := &cells.Cell{
		Name:     cells.Default,
		Pool:     pool,
		Catalog:  catalog.New(pool),
		Purchase: purchase.NewService(pool, logger, purchase.Config{}),
		Room:     room,
	}
	if o.secrets {
		cell.Webhooks = webhooks.NewService(pool, webhooks.ServiceConfig{
			Guard: &webhooks.Guard{AllowPrivate: true}, Keys: testWebhookKeys, Logger: logger,
		})
	}
	h := handlers.New(handlers.Config{
		Cells:     cells.Single(cell),
		Logger:    logger,
		Bearer:    auth.NewVerifier(jwtSecret),
		Admission: signer,
	})
	srv := httptest.NewServer(validating(t, h.Handler()))
	t.Cleanup(srv.Close)
	b := &testBundle{pool: pool, srv: srv, logs: logs, signer: signer}
	t.Cleanup(b.requireNoSecretsLogged(t))
	return &roomBundle{testBundle: b, room: room, rdb: o.rdb, prefix: o.prefix}
}

// runRoom runs the admitter until the test ends.
func (b *roomBundle) runRoom(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = b.room.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// organizerOf returns an organizer token and the organizer id.
func (b *roomBundle) organizerWithID(t *testing.T) string {
	return b.token(t, auth.Identity{UserID: uuid.New(), Role: auth.RoleOrganizer, OrganizerID: uuid.New()})
}

// The hold handler refuses, with 403, a token for another event, of
// another buyer, expired, or revoked — through the HTTP API, PostgreSQL
// and Redis — and accepts the right one.
func TestHoldRefusesAdmissionNotForIt(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{})
	org := b.organizerWithID(t)
	ev, other := b.createEvent(t, org), b.createEvent(t, org)
	userID, tok := b.buyer(t)
	_, otherTok := b.buyer(t)
	adm := b.admit(t, tok, ev.ID)
	otherEventAdm := b.admit(t, tok, other.ID)
	claims, err := b.signer.Verify(adm, userID, uuid.MustParse(ev.ID), "default")
	require.NoError(t, err)
	expired := b.remember(mustSign(t, b.signer, admission.Claims{
		ID: uuid.New(), UserID: userID, EventID: uuid.MustParse(ev.ID), Cell: "default",
		IssuedAt: time.Now().Add(-time.Hour), ExpiresAt: time.Now().Add(-time.Minute),
	}))

	for _, tc := range []struct {
		name, bearer, admission string
	}{
		{"AnotherEvent", tok, otherEventAdm},
		{"AnotherBuyer", otherTok, adm},
		{"Expired", tok, expired},
	} {
		res := b.hold(t, tc.bearer, tc.admission, ev.ID, uuid.NewString(), ev.Seats[0])
		require.Equal(t, http.StatusForbidden, res.status, "%s: %s", tc.name, res.body)
		require.Equal(t, handlers.TypeAdmissionInvalid, problemType(t, res), tc.name)
	}
	require.Equal(t, int64(0), dbtest.Count(t, b.pool, "SELECT count(*) FROM holds"), "no refused token held anything")

	res := b.hold(t, tok, adm, ev.ID, "first", ev.Seats[0])
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)

	require.NoError(t, b.room.Revoke(t.Context(), claims.ID, claims.ExpiresAt))
	res = b.hold(t, tok, adm, ev.ID, "second", ev.Seats[1])
	require.Equal(t, http.StatusForbidden, res.status, "revoked: %s", res.body)
	require.Equal(t, handlers.TypeAdmissionInvalid, problemType(t, res))

	// Another API process learns of the revocation from Redis.
	peer := waitingroom.NewRoom(waitingroom.RoomConfig{
		Store:  waitingroom.NewRedisStore(b.rdb, waitingroom.RedisStoreConfig{Prefix: b.prefix}),
		Signer: b.signer, Events: catalog.New(b.pool), Logger: slog.New(slog.DiscardHandler),
	})
	require.False(t, peer.Revoked(claims.ID))
	require.NoError(t, peer.RefreshRevocations(t.Context()))
	require.True(t, peer.Revoked(claims.ID), "revocations reach every process through Redis")
}

func mustSign(t *testing.T, s *admission.Signer, c admission.Claims) string {
	t.Helper()
	tok, err := s.Sign(c)
	require.NoError(t, err)
	return tok
}

// Joining queues when the onsale is paused (202 with a position), joining
// again is idempotent, polling shows the same place, and once the onsale
// resumes the admitter admits the buyer: the poll returns the token and it
// holds seats.
func TestWaitingRoomQueuesWhilePausedThenAdmits(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{})
	org := b.organizerWithID(t)
	ev := b.createEvent(t, org)
	res := b.do(t, http.MethodPatch, "/v1/events/"+ev.ID+"/onsale", bearer(org), map[string]any{"paused": true})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Equal(t, "paused", res.json(t)["phase"])

	_, first := b.buyer(t)
	_, second := b.buyer(t)
	for i, tok := range []string{first, second} {
		for range 2 {
			res := b.do(t, http.MethodPost, "/v1/events/"+ev.ID+"/waiting-room", bearer(tok), nil)
			require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
			body := res.json(t)
			require.Equal(t, "queued", body["status"])
			require.EqualValues(t, i+1, body["position"], "joining again keeps the place")
			require.Nil(t, body["admissionToken"])
		}
	}
	poll := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/waiting-room", bearer(second), nil)
	require.Equal(t, http.StatusAccepted, poll.status, "%s", poll.body)
	require.EqualValues(t, 2, poll.json(t)["position"])
	_, stranger := b.buyer(t)
	poll = b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/waiting-room", bearer(stranger), nil)
	require.Equal(t, http.StatusNotFound, poll.status, "polling does not join: %s", poll.body)

	b.runRoom(t)
	res = b.do(t, http.MethodPatch, "/v1/events/"+ev.ID+"/onsale", bearer(org), map[string]any{"paused": false})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	var adm string
	require.Eventually(t, func() bool {
		res := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/waiting-room", bearer(first), nil)
		if res.status != http.StatusOK {
			return false
		}
		adm = b.remember(res.json(t)["admissionToken"].(string))
		return true
	}, 10*time.Second, 20*time.Millisecond)
	// The next poll may be told to slow down (429, the per-buyer limit the
	// loop above can reach on a busy machine); the one that answers
	// carries the same token.
	var again response
	require.Eventually(t, func() bool {
		again = b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/waiting-room", bearer(first), nil)
		return again.status != http.StatusTooManyRequests
	}, 10*time.Second, 100*time.Millisecond)
	require.Equal(t, http.StatusOK, again.status, "%s", again.body)
	require.Equal(t, adm, again.json(t)["admissionToken"], "every poll returns the same token")
	require.Equal(t, http.StatusAccepted, b.hold(t, first, adm, ev.ID, "k", ev.Seats[0]).status)
}

// Over the per-buyer limit the waiting room answers 429 with Retry-After.
func TestWaitingRoomRateLimited(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{limits: waitingroom.Limits{PerUser: 3, PerIP: -1}})
	ev := b.createEvent(t, b.organizer(t))
	_, tok := b.buyer(t)
	var limited, ok int
	start := time.Now()
	for range 10 {
		res := b.do(t, http.MethodPost, "/v1/events/"+ev.ID+"/waiting-room", bearer(tok), nil)
		if res.status == http.StatusTooManyRequests {
			limited++
			require.Equal(t, handlers.TypeRateLimited, problemType(t, res))
			require.Equal(t, "1", res.header.Get("Retry-After"))
		} else {
			require.Equal(t, http.StatusOK, res.status, "%s", res.body)
			ok++
		}
	}
	windows := int(time.Now().Unix()-start.Unix()) + 1
	require.LessOrEqual(t, ok, 3*windows, "at most 3 requests in each one-second window")
	require.Positive(t, limited)
}

// The waiting room tells a client its budget (IETF RateLimit headers) on
// every answer: what is left of this second's requests, down to r=0 on
// the 429 that refuses one.
func TestWaitingRoomRateLimitHeaders(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{limits: waitingroom.Limits{PerUser: 3, PerIP: -1}})
	ev := b.createEvent(t, b.organizer(t))
	want := []string{`"waiting-room";r=2;t=1`, `"waiting-room";r=1;t=1`, `"waiting-room";r=0;t=1`, `"waiting-room";r=0;t=1`}
	// Four requests of one buyer in one one-second window; a try whose
	// requests straddle two windows (a slow machine) is made again with
	// another buyer.
	for try := 0; ; try++ {
		_, tok := b.buyer(t)
		start := time.Now()
		var states []string
		for range 4 {
			res := b.do(t, http.MethodPost, "/v1/events/"+ev.ID+"/waiting-room", bearer(tok), nil)
			require.Equal(t, `"waiting-room";q=3;w=1`, res.header.Get("RateLimit-Policy"), "%d %s", res.status, res.body)
			states = append(states, res.header.Get("RateLimit"))
			if res.status == http.StatusTooManyRequests {
				require.Equal(t, "1", res.header.Get("Retry-After"))
			}
		}
		if time.Now().Unix() != start.Unix() && try < 5 {
			continue
		}
		require.Equal(t, want, states)
		return
	}
}

// Redis lost: joins and polls answer 503 with Retry-After and issue
// nothing; a token issued before keeps holding seats; when Redis is back,
// the same client works again with no manual step.
func TestWaitingRoomRedisLost(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	b := setupRoom(t, roomOpts{rdb: srv.Client(t), prefix: "t:"})
	b.runRoom(t)
	ev := b.createEvent(t, b.organizer(t))
	_, tok := b.buyer(t)
	adm := b.admit(t, tok, ev.ID)

	srv.Kill()
	_, late := b.buyer(t)
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		res := b.do(t, method, "/v1/events/"+ev.ID+"/waiting-room", bearer(late), nil)
		require.Equal(t, http.StatusServiceUnavailable, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeUnavailable, problemType(t, res))
		require.Equal(t, "5", res.header.Get("Retry-After"))
		require.NotContains(t, string(res.body), "refused", "no internal text")
	}
	res := b.hold(t, tok, adm, ev.ID, "k", ev.Seats[0])
	require.Equal(t, http.StatusAccepted, res.status, "a token issued before keeps working: %s", res.body)

	srv.Restart(t)
	require.Eventually(t, func() bool {
		res := b.do(t, http.MethodPost, "/v1/events/"+ev.ID+"/waiting-room", bearer(late), nil)
		return res.status == http.StatusOK
	}, 10*time.Second, 50*time.Millisecond, "Redis back: admission resumes by itself")
	res = b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/waiting-room", bearer(tok), nil)
	require.Equal(t, http.StatusOK, res.status, "the admission survived the restart: %s", res.body)
	require.Equal(t, adm, res.json(t)["admissionToken"])
}

// A buyer whose admission the organizer revoked is told "revoked" when
// polling or joining again, without a token, as holds refuse it; another
// buyer stays admitted.
func TestWaitingRoomReportsARevokedAdmission(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{})
	org := b.organizerWithID(t)
	ev := b.createEvent(t, org)
	userID, tok := b.buyer(t)
	adm := b.admit(t, tok, ev.ID)
	_, otherTok := b.buyer(t)
	b.admit(t, otherTok, ev.ID)
	res := b.do(t, http.MethodPost, "/v1/events/"+ev.ID+"/onsale/revocations", bearer(org), map[string]any{"userId": userID})
	require.Equal(t, http.StatusNoContent, res.status, "%s", res.body)

	for _, method := range []string{http.MethodGet, http.MethodPost} {
		res := b.do(t, method, "/v1/events/"+ev.ID+"/waiting-room", bearer(tok), nil)
		require.Equal(t, http.StatusOK, res.status, "%s: %s", method, res.body)
		m := res.json(t)
		require.Equal(t, "revoked", m["status"], method)
		require.NotContains(t, m, "admissionToken", method)
		require.NotContains(t, string(res.body), adm, method)
		require.Contains(t, m, "expiresAt", "%s: when the buyer may join again", method)
	}
	require.Equal(t, http.StatusForbidden, b.hold(t, tok, adm, ev.ID, "k", ev.Seats[0]).status, "the hold agrees")

	res = b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/waiting-room", bearer(otherTok), nil)
	require.Equal(t, http.StatusOK, res.status)
	require.Equal(t, "admitted", res.json(t)["status"])
}

// A queued buyer is told to poll after half their estimated wait, in the
// body and in Retry-After: rarely far back in the queue (at most every 30
// seconds), every second near the front, so a long queue's polls stay a
// small load on the API.
func TestWaitingRoomPollHintFollowsPosition(t *testing.T) {
	t.Parallel()
	// R = 0.5/s, fixed: the first joiner is admitted, the others queue
	// and stay queued (no admitter runs).
	b := setupRoom(t, roomOpts{rate: 0.5})
	ev := b.createEvent(t, b.organizer(t))
	want := map[int]string{1: "1", 2: "2", 3: "3", 40: "30"} // position → seconds: position ÷ 0.5/s ÷ 2, 1 to 30
	for i := 0; i <= 40; i++ {
		_, tok := b.buyer(t)
		res := b.do(t, http.MethodPost, "/v1/events/"+ev.ID+"/waiting-room", bearer(tok), nil)
		if i == 0 {
			require.Equal(t, http.StatusOK, res.status, "%s", res.body)
			continue
		}
		require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
		body := res.json(t)
		require.EqualValues(t, i, body["position"])
		if w, ok := want[i]; ok {
			require.Equal(t, w, res.header.Get("Retry-After"), "position %d", i)
			require.Equal(t, w, fmt.Sprint(body["pollAfterSeconds"]), "position %d", i)
		}
		if i == 40 {
			poll := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/waiting-room", bearer(tok), nil)
			require.Equal(t, http.StatusAccepted, poll.status, "%s", poll.body)
			require.Equal(t, "30", poll.header.Get("Retry-After"), "polls answer the same hint")
		}
	}
}

// The hold latency the release controller reads runs from the request's
// arrival, not from the handler's start: time spent before the handler
// (here a body that takes 300 ms to arrive; in an onsale, waiting for a
// CPU) counts.
func TestHoldLatencyCountsFromArrival(t *testing.T) {
	t.Parallel()
	holds := waitingroom.NewLatencyWindow(time.Minute)
	b := setupRoom(t, roomOpts{holds: holds})
	ev := b.createEvent(t, b.organizer(t))
	_, tok := b.buyer(t)
	adm := b.admit(t, tok, ev.ID)

	const delay = 300 * time.Millisecond
	body, w := io.Pipe()
	time.AfterFunc(delay, func() {
		_, _ = fmt.Fprintf(w, `{"seatIds":[%q]}`, ev.Seats[0])
		_ = w.Close()
	})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.srv.URL+"/v1/events/"+ev.ID+"/holds", body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("X-Admission-Token", adm)
	req.Header.Set("Idempotency-Key", "k")
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusAccepted, res.StatusCode)
	took := time.Since(start)
	got := holds.Quantile(1)
	t.Logf("client saw %s, the controller's window %s", took, got)
	require.GreaterOrEqual(t, got, delay, "the wait for the body counts")
	require.LessOrEqual(t, got, took)
}

// A bearer token verified once is remembered for the polls that follow,
// and only until it expires: past its expiry (and the verifier's leeway)
// the same token is refused, as it was before it was ever remembered; a
// token that differs in one byte of its signature is refused at once.
func TestRememberedBearerExpires(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{})
	ev := b.createEvent(t, b.organizer(t))
	tok, err := auth.Mint(jwtSecret, auth.Identity{UserID: uuid.New(), Role: auth.RoleBuyer}, 2*time.Second)
	require.NoError(t, err)
	b.remember(tok)
	path := "/v1/events/" + ev.ID + "/waiting-room"
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, path, bearer(tok), nil).status)
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, path, bearer(tok), nil).status, "remembered")

	forged := tok[:len(tok)-2] + string("AB"[len(tok)%2]) + tok[len(tok)-1:]
	if forged == tok {
		forged = tok[:len(tok)-2] + "CD"
	}
	require.Equal(t, http.StatusUnauthorized, b.do(t, http.MethodGet, path, bearer(forged), nil).status, "another signature")

	expired := time.Now().Add(2*time.Second + auth.ClockSkew) // exp + the verifier's leeway
	require.Eventually(t, func() bool {
		return b.do(t, http.MethodGet, path, bearer(tok), nil).status == http.StatusUnauthorized
	}, auth.ClockSkew+15*time.Second, 250*time.Millisecond, "an expired token is refused although it was remembered")
	require.False(t, time.Now().Before(expired.Add(-time.Second)), "refused only once expired")
}
