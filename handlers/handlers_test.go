package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/catalog"
	"boxoffice/domain/cells"
	"boxoffice/domain/payments"
	"boxoffice/domain/purchase"
	"boxoffice/domain/waitingroom"
	"boxoffice/domain/waitlist"
	"boxoffice/handlers"
	"boxoffice/platform/admission"
	"boxoffice/platform/auth"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

var (
	jwtSecret     = []byte("test-jwt-secret-0123456789abcdef0123456789")
	admissionKey  = []byte("test-admission-key-0123456789abcdef01234567")
	webhookSecret = "whsec_test_0123456789abcdef0123456789"
)

type testBundle struct {
	pool *pgxpool.Pool
	srv  *httptest.Server
	// logs is every log line the server writes, so tests can prove what
	// never appears in them.
	logs   *testkit.Log
	signer *admission.Signer
	// secrets are the tokens issued during the test; none may be logged.
	secretsMu sync.Mutex
	secrets   []string
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return setupPool(t, dbtest.New(t))
}

// setupPool is setup on a pool of the test's choosing, its handlers'
// configuration changed by opts. The per-buyer hold limit is off unless
// an opt sets it: tests of the hold path hold many times per second.
func setupPool(t *testing.T, pool *pgxpool.Pool, opts ...func(*handlers.Config)) *testBundle {
	t.Helper()
	logs := testkit.NewLog(t)
	logger := logs.Logger
	signer := admission.NewSigner(admission.SignerConfig{Key: admissionKey})
	cfg := handlers.Config{
		Cells: cells.Single(&cells.Cell{
			Name:     cells.Default,
			Pool:     pool,
			Catalog:  catalog.New(pool),
			Purchase: purchase.NewService(pool, logger, purchase.Config{}),
			Ingress: payments.NewIngress(pool, payments.IngressConfig{
				WebhookSecret: webhookSecret, Logger: logger,
			}),
		}),
		Logger:         logger,
		Bearer:         auth.NewVerifier(jwtSecret),
		Admission:      signer,
		HoldsPerSecond: -1,
	}
	for _, o := range opts {
		o(&cfg)
	}
	// Built after opts, on the catalog they chose.
	if c := cellOf(&cfg); c.Room == nil {
		c.Room = fixedRoom(signer, c.Catalog, logger)
	}
	if c := cellOf(&cfg); c.Waitlist == nil && c.Purchase != nil {
		c.Waitlist = waitlist.New(pool, c.Purchase, waitlist.Config{Logger: logger})
	}
	srv := httptest.NewServer(validating(t, handlers.New(cfg).Handler()))
	t.Cleanup(srv.Close)
	b := &testBundle{pool: pool, srv: srv, logs: logs, signer: signer}
	b.remember(webhookSecret)
	t.Cleanup(b.requireNoSecretsLogged(t))
	return b
}

// cellOf is the one cell of a test's configuration, for opts to change
// before the handlers are built.
func cellOf(cfg *handlers.Config) *cells.Cell { return cfg.Cells.Cells()[0] }

// noCells is the router of a test that reaches no cell: one cell without
// services.
func noCells() *cells.Router { return cells.Single(&cells.Cell{Name: cells.Default}) }

// fixedRoom is the waiting room of a test that does not study it: in
// process, admitting at a fixed rate, without organizer settings.
func fixedRoom(signer *admission.Signer, events *catalog.Catalog, logger *slog.Logger) *waitingroom.Room {
	return waitingroom.NewRoom(waitingroom.RoomConfig{
		Store: waitingroom.NewMemoryStore(), Signer: signer, Events: events, Logger: logger,
	})
}

// requireNoSecretsLogged returns the check, for t.Cleanup, that none of the
// tokens and secrets remembered during the test reached the logs.
func (b *testBundle) requireNoSecretsLogged(t *testing.T) func() {
	return func() {
		b.secretsMu.Lock()
		defer b.secretsMu.Unlock()
		b.logs.RequireNoSecrets(t, b.secrets...)
	}
}

func (b *testBundle) remember(secret string) string {
	b.secretsMu.Lock()
	defer b.secretsMu.Unlock()
	b.secrets = append(b.secrets, secret)
	return secret
}

func (b *testBundle) token(t *testing.T, id auth.Identity) string {
	t.Helper()
	tok, err := auth.Mint(jwtSecret, id, time.Hour)
	require.NoError(t, err)
	return b.remember(tok)
}

func (b *testBundle) buyer(t *testing.T) (uuid.UUID, string) {
	id := uuid.New()
	return id, b.token(t, auth.Identity{UserID: id, Role: auth.RoleBuyer})
}

func (b *testBundle) organizer(t *testing.T) string {
	return b.token(t, auth.Identity{UserID: uuid.New(), Role: auth.RoleOrganizer, OrganizerID: uuid.New()})
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.body, &m), "body: %s", r.body)
	return m
}

func (b *testBundle) do(t *testing.T, method, path string, headers map[string]string, body any) response {
	t.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	case []byte:
		rd = bytes.NewReader(v)
	default:
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, b.srv.URL+path, rd)
	require.NoError(t, err)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{status: res.StatusCode, header: res.Header, body: raw}
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

type event struct {
	ID    string
	Seats []string // in layout order
}

func (b *testBundle) createEvent(t *testing.T, orgToken string, sections ...map[string]any) event {
	t.Helper()
	if len(sections) == 0 {
		sections = []map[string]any{{"name": "Floor", "rows": 4, "seatsPerRow": 25, "priceMinor": 5000}}
	}
	res := b.do(t, http.MethodPost, "/v1/events", bearer(orgToken), map[string]any{
		"name": "Test Night", "startsAt": "2027-06-01T19:30:00Z", "currency": "eur", "sections": sections,
	})
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	ev := event{ID: res.json(t)["id"].(string)}
	seats := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/seats", nil, nil)
	require.Equal(t, http.StatusOK, seats.status, "%s", seats.body)
	for _, s := range seats.json(t)["seats"].([]any) {
		ev.Seats = append(ev.Seats, s.(map[string]any)["id"].(string))
	}
	return ev
}

func (b *testBundle) admit(t *testing.T, buyerToken, eventID string) string {
	t.Helper()
	res := b.do(t, http.MethodPost, "/v1/events/"+eventID+"/waiting-room", bearer(buyerToken), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	return b.remember(res.json(t)["admissionToken"].(string))
}

func (b *testBundle) hold(t *testing.T, buyerToken, admissionToken, eventID, key string, seats ...string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/events/"+eventID+"/holds", map[string]string{
		"Authorization":     "Bearer " + buyerToken,
		"X-Admission-Token": admissionToken,
		"Idempotency-Key":   key,
	}, map[string]any{"seatIds": seats})
}

// rowCounts is every table a hold writes, for asserting "writes nothing".
func rowCounts(t *testing.T, pool *pgxpool.Pool) map[string]int64 {
	t.Helper()
	counts := map[string]int64{}
	for _, table := range []string{"orders", "holds", "hold_seats", "idempotency_keys", "outbox", "tickets", "payments"} {
		counts[table] = dbtest.Count(t, pool, "SELECT count(*) FROM "+table)
	}
	return counts
}

func activeHolds(t *testing.T, pool *pgxpool.Pool, seatID string) int64 {
	t.Helper()
	return dbtest.Count(t, pool, "SELECT count(*) FROM hold_seats WHERE seat_id = $1 AND released_at IS NULL", seatID)
}

func problemType(t *testing.T, r response) string {
	t.Helper()
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"), "%s", r.body)
	return r.json(t)["type"].(string)
}

func TestHoldRaceForOneSeat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := b.createEvent(t, b.organizer(t))
	seat := ev.Seats[0]

	const buyers = 100
	type attempt struct{ token, admission string }
	attempts := make([]attempt, buyers)
	for i := range attempts {
		_, tok := b.buyer(t)
		attempts[i] = attempt{tok, b.admit(t, tok, ev.ID)}
	}
	statuses := make([]int, buyers)
	bodies := make([]response, buyers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, a := range attempts {
		wg.Go(func() {
			<-start
			bodies[i] = b.hold(t, a.token, a.admission, ev.ID, uuid.NewString(), seat)
			statuses[i] = bodies[i].status
		})
	}
	close(start)
	wg.Wait()

	counts := map[int]int{}
	for i, s := range statuses {
		counts[s]++
		if s == http.StatusConflict {
			require.Equal(t, handlers.TypeSeatUnavailable, problemType(t, bodies[i]))
			require.Equal(t, []any{seat}, bodies[i].json(t)["seatIds"])
		}
	}
	require.Equal(t, map[int]int{http.StatusAccepted: 1, http.StatusConflict: buyers - 1}, counts)
	require.EqualValues(t, 1, activeHolds(t, b.pool, seat))
	require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM orders"))
	require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE event_type = 'HoldCreated'"))
}

// Two buyers race for overlapping seats listed in opposite orders. Were the
// locks not taken in one order, PostgreSQL would abort one as a deadlock;
// that must never reach a client, and no seat may be held twice.
func TestHoldOverlappingOrdersNeverDeadlockOrDoubleHold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const rounds = 200
	ev := b.createEvent(t, b.organizer(t), map[string]any{"name": "Floor", "rows": 20, "seatsPerRow": 40, "priceMinor": 5000})
	require.GreaterOrEqual(t, len(ev.Seats), rounds*4)
	_, tokA := b.buyer(t)
	_, tokB := b.buyer(t)
	admA, admB := b.admit(t, tokA, ev.ID), b.admit(t, tokB, ev.ID)

	for round := range rounds {
		s := ev.Seats[round*4 : round*4+4]
		var resA, resB response
		var wg sync.WaitGroup
		wg.Go(func() { resA = b.hold(t, tokA, admA, ev.ID, uuid.NewString(), s[0], s[1], s[2]) })
		wg.Go(func() { resB = b.hold(t, tokB, admB, ev.ID, uuid.NewString(), s[3], s[2], s[1]) })
		wg.Wait()
		got := []int{resA.status, resB.status}
		require.ElementsMatch(t, []int{http.StatusAccepted, http.StatusConflict}, got,
			"round %d: A=%d %s B=%d %s", round, resA.status, resA.body, resB.status, resB.body)
	}
	require.EqualValues(t, 0, dbtest.Count(t, b.pool,
		"SELECT count(*) FROM (SELECT seat_id FROM hold_seats WHERE released_at IS NULL GROUP BY seat_id HAVING count(*) > 1) x"))
	require.EqualValues(t, rounds, dbtest.Count(t, b.pool, "SELECT count(*) FROM orders"))
	require.EqualValues(t, rounds*3, dbtest.Count(t, b.pool, "SELECT count(*) FROM hold_seats WHERE released_at IS NULL"))
}

func TestHoldIdempotency(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentDuplicatesGetOneOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := b.createEvent(t, b.organizer(t))
		_, tok := b.buyer(t)
		adm := b.admit(t, tok, ev.ID)
		const twins = 8
		res := make([]response, twins)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range twins {
			wg.Go(func() {
				<-start
				res[i] = b.hold(t, tok, adm, ev.ID, "key-1", ev.Seats[0], ev.Seats[1])
			})
		}
		close(start)
		wg.Wait()
		for i := range twins {
			require.Equal(t, http.StatusAccepted, res[i].status, "%s", res[i].body)
			require.JSONEq(t, string(res[0].body), string(res[i].body))
			require.Equal(t, res[0].header.Get("Location"), res[i].header.Get("Location"))
		}
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM orders"))
		// One hold's events: HoldCreated and PaymentAuthorizationRequested.
		require.EqualValues(t, 2, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox"))
	})

	t.Run("ConcurrentDuplicatesWithSeatsInAnotherOrderGetOneOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := b.createEvent(t, b.organizer(t))
		_, tok := b.buyer(t)
		adm := b.admit(t, tok, ev.ID)
		var a, c response
		var wg sync.WaitGroup
		wg.Go(func() { a = b.hold(t, tok, adm, ev.ID, "key-1", ev.Seats[0], ev.Seats[1]) })
		wg.Go(func() { c = b.hold(t, tok, adm, ev.ID, "key-1", ev.Seats[1], ev.Seats[0]) })
		wg.Wait()
		require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
		require.JSONEq(t, string(a.body), string(c.body))
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM orders"))
	})

	t.Run("RetryAfterCompletionReturnsOriginal", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := b.createEvent(t, b.organizer(t))
		_, tok := b.buyer(t)
		adm := b.admit(t, tok, ev.ID)
		first := b.hold(t, tok, adm, ev.ID, "key-1", ev.Seats[0])
		require.Equal(t, http.StatusAccepted, first.status, "%s", first.body)
		// Even after the hold expired and its seat was reclaimed by a
		// stranger, the retry answers with the original order.
		dbtest.Exec(t, b.pool, "UPDATE holds SET expires_at = now() - interval '1 minute'")
		_, other := b.buyer(t)
		require.Equal(t, http.StatusAccepted, b.hold(t, other, b.admit(t, other, ev.ID), ev.ID, "k", ev.Seats[0]).status)
		again := b.hold(t, tok, adm, ev.ID, "key-1", ev.Seats[0])
		require.Equal(t, http.StatusAccepted, again.status, "%s", again.body)
		require.JSONEq(t, string(first.body), string(again.body))
		require.EqualValues(t, 2, dbtest.Count(t, b.pool, "SELECT count(*) FROM orders"))
	})

	t.Run("SameKeyDifferentBodyConflicts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := b.createEvent(t, b.organizer(t))
		_, tok := b.buyer(t)
		adm := b.admit(t, tok, ev.ID)
		require.Equal(t, http.StatusAccepted, b.hold(t, tok, adm, ev.ID, "key-1", ev.Seats[0]).status)
		before := rowCounts(t, b.pool)
		for _, seats := range [][]string{{ev.Seats[1]}, {ev.Seats[0], ev.Seats[1]}} {
			res := b.hold(t, tok, adm, ev.ID, "key-1", seats...)
			require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
			require.Equal(t, handlers.TypeIdempotencyConflict, problemType(t, res))
		}
		require.Equal(t, before, rowCounts(t, b.pool))
	})

	t.Run("ConcurrentSameKeyDifferentBodies", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := b.createEvent(t, b.organizer(t))
		_, tok := b.buyer(t)
		adm := b.admit(t, tok, ev.ID)
		for round := range 20 {
			key := fmt.Sprintf("key-%d", round)
			var x, y response
			var wg sync.WaitGroup
			wg.Go(func() { x = b.hold(t, tok, adm, ev.ID, key, ev.Seats[round*2]) })
			wg.Go(func() { y = b.hold(t, tok, adm, ev.ID, key, ev.Seats[round*2+1]) })
			wg.Wait()
			require.ElementsMatch(t, []int{http.StatusAccepted, http.StatusConflict}, []int{x.status, y.status},
				"%s / %s", x.body, y.body)
		}
		require.EqualValues(t, 20, dbtest.Count(t, b.pool, "SELECT count(*) FROM orders"))
	})

	t.Run("SameKeyOtherUserIsIndependent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := b.createEvent(t, b.organizer(t))
		_, tokA := b.buyer(t)
		_, tokB := b.buyer(t)
		a := b.hold(t, tokA, b.admit(t, tokA, ev.ID), ev.ID, "shared-key", ev.Seats[0])
		c := b.hold(t, tokB, b.admit(t, tokB, ev.ID), ev.ID, "shared-key", ev.Seats[1])
		require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
		require.Equal(t, http.StatusAccepted, c.status, "%s", c.body)
		require.NotEqual(t, a.json(t)["orderId"], c.json(t)["orderId"])
	})
}

func TestHoldReclaimsOnlyExpiredUnconfirmedHolds(t *testing.T) {
	t.Parallel()

	t.Run("ExpiredHoldSeatsCanBeHeldAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := b.createEvent(t, b.organizer(t))
		_, tokA := b.buyer(t)
		_, tokB := b.buyer(t)
		admA, admB := b.admit(t, tokA, ev.ID), b.admit(t, tokB, ev.ID)
		require.Equal(t, http.StatusAccepted, b.hold(t, tokA, admA, ev.ID, "a", ev.Seats[0], ev.Seats[1]).status)
		require.Equal(t, http.StatusConflict, b.hold(t, tokB, admB, ev.ID, "b1", ev.Seats[1]).status)

		dbtest.Exec(t, b.pool, "UPDATE holds SET expires_at = now() - interval '1 second'")
		res := b.hold(t, tokB, admB, ev.ID, "b2", ev.Seats[1])
		require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
		require.EqualValues(t, 1, activeHolds(t, b.pool, ev.Seats[1]))
		// Only the seat that was asked for is reclaimed.
		require.EqualValues(t, 1, activeHolds(t, b.pool, ev.Seats[0]))
	})

	t.Run("ConfirmedHoldIsNeverReclaimed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := b.createEvent(t, b.organizer(t))
		_, tokA := b.buyer(t)
		_, tokB := b.buyer(t)
		require.Equal(t, http.StatusAccepted, b.hold(t, tokA, b.admit(t, tokA, ev.ID), ev.ID, "a", ev.Seats[0]).status)
		dbtest.Exec(t, b.pool, "UPDATE holds SET status = 'confirmed', expires_at = now() - interval '1 hour'")
		res := b.hold(t, tokB, b.admit(t, tokB, ev.ID), ev.ID, "b", ev.Seats[0])
		require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
		require.EqualValues(t, 1, activeHolds(t, b.pool, ev.Seats[0]))
	})

	t.Run("TicketedSeatIsNeverHeld", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := b.createEvent(t, b.organizer(t))
		_, tokA := b.buyer(t)
		_, tokB := b.buyer(t)
		first := b.hold(t, tokA, b.admit(t, tokA, ev.ID), ev.ID, "a", ev.Seats[0])
		require.Equal(t, http.StatusAccepted, first.status)
		// Ticketing passes ownership from the hold to a ticket row.
		orderID := first.json(t)["orderId"]
		dbtest.Exec(t, b.pool, "INSERT INTO tickets (id, order_id, seat_id, event_id) SELECT gen_random_uuid(), $1, id, event_id FROM seats WHERE id = $2", orderID, ev.Seats[0])
		dbtest.Exec(t, b.pool, "UPDATE hold_seats SET released_at = now()")
		dbtest.Exec(t, b.pool, "UPDATE holds SET status = 'confirmed'")

		admB := b.admit(t, tokB, ev.ID)
		res := b.hold(t, tokB, admB, ev.ID, "b", ev.Seats[0], ev.Seats[1])
		require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
		require.Equal(t, []any{ev.Seats[0]}, res.json(t)["seatIds"])
		require.EqualValues(t, 0, activeHolds(t, b.pool, ev.Seats[1]))

		seats := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/seats", nil, nil).json(t)["seats"].([]any)
		require.Equal(t, "sold", seats[0].(map[string]any)["status"])
		require.Equal(t, "available", seats[1].(map[string]any)["status"])
	})
}
