package roles

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/boxoffice/boxoffice/client"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
	"boxoffice/migrations"
	"boxoffice/platform/admission"
	"boxoffice/platform/auth"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
	"boxoffice/platform/pgcluster"
	"boxoffice/relay"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/natstest"
)

// cellStack is one purchase cell's back end as the test runs it: the
// cell's own relay and workers on its own database and bus namespace,
// each startable and stoppable on its own.
type cellStack struct {
	name string
	pool *pgxpool.Pool
	cfg  Config

	mu     sync.Mutex
	cancel map[string]context.CancelFunc
	done   map[string]chan error
	count  map[string]int
}

// start runs the relay ("relay") or every worker ("work") of the cell.
func (c *cellStack) start(t *testing.T, role string, nc *nats.Conn, js jetstream.JetStream, logger *slog.Logger) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var runs []func(context.Context) error
	switch role {
	case "relay":
		r, err := relay.New(c.pool, nc, relay.Config{Logger: logger, Bus: bus.ForCell(c.name), Registerer: prometheus.NewRegistry()})
		require.NoError(t, err)
		runs = append(runs, r.Run)
	case "work":
		provider, sandbox, err := newProvider(c.cfg, c.pool, logger)
		require.NoError(t, err)
		runs, err = startWorkers(c.cfg, CellDeps{
			Name: c.name, Pool: c.pool, JS: js, Logger: logger, Reg: prometheus.NewRegistry(),
			Provider: provider, Sandbox: sandbox,
		}, nil)
		require.NoError(t, err)
	}
	done := make(chan error, len(runs))
	for _, run := range runs {
		go func() { done <- run(ctx) }()
	}
	c.mu.Lock()
	c.cancel[role], c.done[role], c.count[role] = cancel, done, len(runs)
	c.mu.Unlock()
	t.Cleanup(func() { c.stop(t, role) })
}

// stop stops the role and waits until every run of it returned.
func (c *cellStack) stop(t *testing.T, role string) {
	c.mu.Lock()
	cancel, done, n := c.cancel[role], c.done[role], c.count[role]
	delete(c.cancel, role)
	c.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	for range n {
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("cell %s %s: %v", c.name, role, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("cell %s %s did not stop", c.name, role)
			return
		}
	}
}

// TestTwoCells runs one API process over two purchase cells, each with its
// own database (cell b on a private PostgreSQL server the test can stop),
// relay, workers and bus namespace on one JetStream server:
//   - a hold for an event of cell a writes only cell a's database, routed
//     by the cell in the admission token;
//   - each cell's relay and workers run independently: with cell b's
//     relay stopped, cell a still sells to the ticket, and b catches up
//     when its relay returns;
//   - cell b is dedicated to one organizer (BOXOFFICE_CELL_B_ORGANIZERS):
//     its event is created, sold, reported (sales, orders, check-ins)
//     and audited in b, cell a's writer has none of its rows, and no
//     other organizer is placed in b;
//   - with cell b's database down, cell a still sells, and b's events
//     answer 503 cell-unavailable instead of failing.
func TestTwoCells(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	logs := testkit.NewLog(t, testkit.Level(slog.LevelInfo))
	logger := logs.Logger

	urlA := dbtest.NewURL(t)
	dir := t.TempDir()
	if os.Geteuid() == 0 { // PostgreSQL then runs as postgres, which must reach dir
		require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	}
	clusterB, err := pgcluster.Start(ctx, pgcluster.Config{Dir: filepath.Join(dir, "cell-b"), Fast: true, Temporary: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = clusterB.Stop(context.Background()) })
	urlB := clusterB.URL()
	require.NoError(t, migrations.Up(ctx, urlB))

	ns := natstest.New(t)
	nc, js := ns.Connect(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	api := "http://" + ln.Addr().String()
	star := uuid.New() // the organizer of the stadium onsale, cell b's only one
	env := withVars(testSecrets(t), map[string]string{
		"BOXOFFICE_CELL_B_ORGANIZERS":   star.String(),
		"BOXOFFICE_CELLS":               "a,b",
		"BOXOFFICE_CELL_A_DATABASE_URL": urlA,
		"BOXOFFICE_CELL_B_DATABASE_URL": urlB,
		"BOXOFFICE_PAYMENTS":            "sandbox",
		"BOXOFFICE_SANDBOX_WEBHOOK_URL": api + "/v1/webhooks/stripe",
		"DATABASE_MAX_CONNS":            "8",
		// The test checks admission tokens with the key derived from
		// BOXOFFICE_ADMISSION_KEY.
		"BOXOFFICE_ADMISSION_SIGNING_KEY": "",
	})
	getenv := func(k string) string { return env[k] }
	cfg, err := LoadConfig(getenv, "BOXOFFICE_JWT_SECRET")
	require.NoError(t, err)
	require.Equal(t, []cellConfig{{Name: "a", DatabaseURL: urlA}, {Name: "b", DatabaseURL: urlB, Organizers: []uuid.UUID{star}}}, cfg.Cells)

	// The API process: both cells.
	served, err := openCells(ctx, cfg, logger, prometheus.NewRegistry(), js)
	require.NoError(t, err)
	t.Cleanup(served.close)
	srvCtx, stopSrv := context.WithCancel(context.Background())
	srvDone := make(chan error, 1+len(served.runs))
	go func() {
		srvDone <- ServeHTTP(srvCtx, ln, NewAPI(cfg, served.router, logger, prometheus.NewRegistry(), served.checks).Handler(), logger)
	}()
	for _, run := range served.runs {
		go func() { srvDone <- run(srvCtx) }()
	}
	t.Cleanup(func() {
		stopSrv()
		for range 1 + len(served.runs) {
			<-srvDone
		}
	})

	// Each cell's back end, as `BOXOFFICE_CELL=<name> boxoffice relay|work`.
	stacks := map[string]*cellStack{}
	for _, cc := range cfg.Cells {
		ccfg, err := LoadConfig(func(k string) string {
			if k == "BOXOFFICE_CELL" {
				return cc.Name
			}
			return env[k]
		})
		require.NoError(t, err)
		require.Equal(t, cc.DatabaseURL, ccfg.DatabaseURL, "a worker reads its cell's database from BOXOFFICE_CELL_<NAME>_DATABASE_URL")
		require.Equal(t, bus.ForCell(cc.Name), ccfg.Streams.Namespace)
		require.NoError(t, bus.Provision(ctx, js, ccfg.Streams))
		pool, err := db.NewPool(ctx, db.PoolConfig{URL: cc.DatabaseURL, MaxConns: 8})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s := &cellStack{name: cc.Name, pool: pool, cfg: ccfg, cancel: map[string]context.CancelFunc{}, done: map[string]chan error{}, count: map[string]int{}}
		clog := logger.With("cell", cc.Name)
		s.start(t, "relay", nc, js, clog)
		s.start(t, "work", nil, js, clog)
		stacks[cc.Name] = s
	}
	a, b := stacks["a"], stacks["b"]

	// Organizers land in their home cell, and their events with them: b
	// is star's alone, every other organizer's home is a.
	apiClient, err := client.NewClientWithResponses(api)
	require.NoError(t, err)
	c := &cellsClient{t: t, api: apiClient, secret: []byte(env["BOXOFFICE_JWT_SECRET"])}
	eventA := c.createEvent(uuid.New())
	eventB := c.createEvent(star)
	require.Equal(t, int64(1), dbtest.Count(t, a.pool, `SELECT count(*) FROM events WHERE id = $1 AND purchase_cell = 'a'`, eventA))
	require.Equal(t, int64(0), dbtest.Count(t, b.pool, `SELECT count(*) FROM events WHERE id = $1`, eventA))
	require.Equal(t, int64(1), dbtest.Count(t, b.pool, `SELECT count(*) FROM events WHERE id = $1 AND purchase_cell = 'b'`, eventB))

	signer := admission.NewSigner(admission.SignerConfig{Key: []byte(env["BOXOFFICE_ADMISSION_KEY"])})
	t.Run("HoldsForAnEventTouchOnlyItsCell", func(t *testing.T) {
		buyer := uuid.New()
		token := c.admit(buyer, eventA)
		_, err := signer.Verify(token, buyer, eventA, "a")
		require.NoError(t, err, "the admission token names cell a")
		ordersB := dbtest.Count(t, b.pool, `SELECT count(*) FROM orders`)
		orderID := c.hold(buyer, eventA, token, 0)
		c.payAndWait(buyer, orderID)
		require.Equal(t, int64(1), dbtest.Count(t, a.pool, `SELECT count(*) FROM orders WHERE id = $1 AND status = 'ticketed'`, orderID))
		require.Equal(t, ordersB, dbtest.Count(t, b.pool, `SELECT count(*) FROM orders`), "cell b got an order")
		for _, table := range []string{"orders WHERE id = $1", "holds WHERE order_id = $1", "payments WHERE order_id = $1", "tickets WHERE order_id = $1", "outbox WHERE aggregate_id = $1", "sandbox_payment_intents WHERE metadata->>'order_id' = $1::text"} {
			require.Equal(t, int64(0), dbtest.Count(t, b.pool, `SELECT count(*) FROM `+table, orderID), "cell b has %s", table)
		}
		// The events went through cell a's namespace only.
		requireStreamHas(t, js, bus.ForCell("a"), 1)
		requireStreamHas(t, js, bus.ForCell("b"), 0)
		requireStreamHas(t, js, bus.Namespace{}, 0)

		// A token for cell a does not buy in cell b's event.
		res := c.holdSeat(buyer, eventB, token, c.seats(eventB)[0])
		require.Equal(t, http.StatusForbidden, res.StatusCode())
	})

	t.Run("ADedicatedCellSellsReportsAndAuditsItsOrganizersEvent", func(t *testing.T) {
		buyer := uuid.New()
		orderID := c.hold(buyer, eventB, c.admit(buyer, eventB), 3)
		c.payAndWait(buyer, orderID)
		o := c.order(buyer, orderID).JSON200
		require.NotEmpty(t, o.Tickets)
		require.NotNil(t, o.Tickets[0].QrPayload)

		starBearer := client.WithBearer(c.token(auth.Identity{UserID: star, OrganizerID: star, Role: auth.RoleOrganizer}))
		events, err := c.api.ListEventsWithResponse(ctx, nil, starBearer)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, events.StatusCode(), "%s", events.Body)
		require.Len(t, events.JSON200.Events, 1)
		require.Equal(t, eventB.String(), events.JSON200.Events[0].ID)

		scanner := client.WithBearer(c.token(auth.Identity{UserID: uuid.New(), OrganizerID: star, Role: auth.RoleScanner}))
		in, err := c.api.CheckInWithResponse(ctx, eventB, client.CheckInJSONRequestBody{QrPayload: *o.Tickets[0].QrPayload, Gate: "north"}, scanner)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, in.StatusCode(), "%s", in.Body)
		counts, err := c.api.CountCheckInsWithResponse(ctx, eventB, starBearer)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, counts.StatusCode(), "%s", counts.Body)
		require.EqualValues(t, 1, counts.JSON200.Total)

		sales, err := c.api.GetEventSalesWithResponse(ctx, eventB, starBearer)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, sales.StatusCode(), "%s", sales.Body)
		ticketed := dbtest.Count(t, b.pool, `SELECT count(*) FROM orders WHERE event_id = $1 AND status = 'ticketed'`, eventB)
		require.EqualValues(t, ticketed, sales.JSON200.OrdersByStatus["ticketed"])
		require.GreaterOrEqual(t, ticketed, int64(1))
		orders, err := c.api.ListEventOrdersWithResponse(ctx, eventB, nil, starBearer)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, orders.StatusCode(), "%s", orders.Body)
		var listed []string
		for _, o := range orders.JSON200.Orders {
			listed = append(listed, o.ID)
		}
		require.Contains(t, listed, orderID.String())

		// Cell a's writer has none of it: not the organizer, the event,
		// its orders, tickets, check-ins or events on the outbox.
		for _, q := range []string{
			`SELECT count(*) FROM organizers WHERE id = $1`, `SELECT count(*) FROM events WHERE organizer_id = $1`,
		} {
			require.Zero(t, dbtest.Count(t, a.pool, q, star), q)
		}
		for _, q := range []string{
			`SELECT count(*) FROM events WHERE id = $1`, `SELECT count(*) FROM orders WHERE event_id = $1`,
			`SELECT count(*) FROM tickets t JOIN orders o ON o.id = t.order_id WHERE o.event_id = $1`,
			`SELECT count(*) FROM outbox WHERE aggregate_id IN (SELECT id FROM orders WHERE event_id = $1)`,
		} {
			require.Zero(t, dbtest.Count(t, a.pool, q, eventB), q)
		}
		require.Zero(t, dbtest.Count(t, a.pool, `SELECT count(*) FROM check_ins WHERE ticket_id = (SELECT id FROM tickets WHERE order_id = $1 LIMIT 1)`, orderID))
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, `SELECT count(*) FROM check_ins c JOIN tickets t ON t.id = c.ticket_id WHERE t.order_id = $1`, orderID))

		// The audit of cell b, as `BOXOFFICE_CELL=b boxoffice audit` runs it.
		var out strings.Builder
		require.NoError(t, runAudit(ctx, nil, func(k string) string {
			if k == "BOXOFFICE_CELL" {
				return "b"
			}
			return env[k]
		}, &out), "%s", out.String())
		require.Contains(t, out.String(), "invariants hold")

		// Another new organizer is never placed in b.
		other := c.createEvent(uuid.New())
		require.Zero(t, dbtest.Count(t, b.pool, `SELECT count(*) FROM events WHERE id = $1`, other))
	})

	t.Run("EachCellsRelayAndWorkersRunIndependently", func(t *testing.T) {
		b.stop(t, "relay")
		buyerB := uuid.New()
		orderB := c.hold(buyerB, eventB, c.admit(buyerB, eventB), 1)

		// Cell a sells to the ticket while cell b's relay is down.
		buyerA := uuid.New()
		orderA := c.hold(buyerA, eventA, c.admit(buyerA, eventA), 1)
		c.payAndWait(buyerA, orderA)

		// Nothing of cell b's moved: its hold's two events (HoldCreated,
		// PaymentAuthorizationRequested) are not even published.
		require.Equal(t, int64(2), dbtest.Count(t, b.pool, `SELECT count(*) FROM outbox WHERE aggregate_id = $1`, orderB))
		o := c.order(buyerB, orderB)
		require.NotNil(t, o.JSON200)
		require.Nil(t, o.JSON200.Payment, "cell b's order moved without its relay")

		b.start(t, "relay", nc, js, logger.With("cell", "b"))
		c.payAndWait(buyerB, orderB)
	})

	t.Run("ACellThatIsDownDoesNotStopTheOther", func(t *testing.T) {
		buyerB := uuid.New()
		tokenB := c.admit(buyerB, eventB)
		b.stop(t, "work")
		b.stop(t, "relay")
		require.NoError(t, clusterB.Stop(ctx))

		buyerA := uuid.New()
		orderA := c.hold(buyerA, eventA, c.admit(buyerA, eventA), 2)
		c.payAndWait(buyerA, orderA)

		// Cell b's event answers 503 cell-unavailable, with Retry-After,
		// once the catalog's one-second cache of its seat map (read by
		// the holds above) has run out: cell a's purchase may take less.
		bearerB := client.WithBearer(c.buyerToken(buyerB))
		require.Eventually(t, func() bool {
			res, err := c.api.ListSeatsWithResponse(context.Background(), eventB, nil, bearerB)
			return err == nil && res.StatusCode() == http.StatusServiceUnavailable
		}, 10*time.Second, 50*time.Millisecond, "cell b's seat map still served with its cell down")
		for _, req := range []struct {
			name string
			do   func() (*http.Response, []byte, error)
		}{
			{"GET seats", func() (*http.Response, []byte, error) {
				res, err := c.api.ListSeatsWithResponse(context.Background(), eventB, nil, bearerB)
				if err != nil {
					return nil, nil, err
				}
				return res.HTTPResponse, res.Body, nil
			}},
			{"POST holds", func() (*http.Response, []byte, error) {
				res := c.holdSeat(buyerB, eventB, tokenB, uuid.NewString())
				return res.HTTPResponse, res.Body, nil
			}},
			{"GET an unknown event, which may be in b", func() (*http.Response, []byte, error) {
				res, err := c.api.GetEventWithResponse(context.Background(), uuid.New(), nil, bearerB)
				if err != nil {
					return nil, nil, err
				}
				return res.HTTPResponse, res.Body, nil
			}},
		} {
			res, body, err := req.do()
			require.NoError(t, err, req.name)
			require.Equal(t, http.StatusServiceUnavailable, res.StatusCode, req.name)
			require.Equal(t, handlers.TypeCellUnavailable, client.ProblemOf(res, body).Type, req.name)
			require.NotEmpty(t, res.Header.Get("Retry-After"), req.name)
		}
	})
	logs.RequireNoSecrets(t, env["STRIPE_WEBHOOK_SECRET"])
}

// requireStreamHas checks how many HoldCreated events ns's stream holds.
func requireStreamHas(t *testing.T, js jetstream.JetStream, ns bus.Namespace, want uint64) {
	t.Helper()
	subject := ns.Subject("ticketing.order.HoldCreated")
	require.Eventually(t, func() bool {
		s, err := js.Stream(context.Background(), ns.Stream())
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background(), jetstream.WithSubjectFilter(subject))
		return err == nil && info.State.Subjects[subject] == want
	}, 10*time.Second, 50*time.Millisecond, "stream %s should hold %d HoldCreated", ns.Stream(), want)
}

// cellsClient is a buyer's and an organizer's client of the API: the
// generated one.
type cellsClient struct {
	t      *testing.T
	api    *client.ClientWithResponses
	secret []byte
}

func (c *cellsClient) token(id auth.Identity) string {
	tok, err := auth.Mint(c.secret, id, time.Hour)
	require.NoError(c.t, err)
	return tok
}

func (c *cellsClient) buyerToken(id uuid.UUID) string {
	return c.token(auth.Identity{UserID: id, Role: auth.RoleBuyer})
}

func (c *cellsClient) createEvent(organizer uuid.UUID) uuid.UUID {
	c.t.Helper()
	res, err := c.api.CreateEventWithResponse(context.Background(), nil, client.CreateEventJSONRequestBody{
		Name: "cells", StartsAt: time.Date(2030, 1, 1, 20, 0, 0, 0, time.UTC), Currency: "eur",
		Sections: []client.SectionInput{{Name: "A", Rows: 2, SeatsPerRow: 5, PriceMinor: 1000}},
	}, client.WithBearer(c.token(auth.Identity{UserID: organizer, OrganizerID: organizer, Role: auth.RoleOrganizer})))
	require.NoError(c.t, err)
	require.Equal(c.t, http.StatusCreated, res.StatusCode())
	id, err := uuid.Parse(res.JSON201.ID)
	require.NoError(c.t, err)
	return id
}

func (c *cellsClient) seats(event uuid.UUID) []string {
	c.t.Helper()
	res, err := c.api.ListSeatsWithResponse(context.Background(), event, nil, client.WithBearer(c.buyerToken(uuid.New())))
	require.NoError(c.t, err)
	require.Equal(c.t, http.StatusOK, res.StatusCode())
	var ids []string
	for _, s := range res.JSON200.Seats {
		ids = append(ids, s.ID)
	}
	return ids
}

// admit joins the waiting room and polls it until admitted.
func (c *cellsClient) admit(buyer, event uuid.UUID) string {
	c.t.Helper()
	bearer := client.WithBearer(c.buyerToken(buyer))
	// token is the admission of a 200; a 202 (queued) has none.
	token := func(room *client.WaitingRoomBody) string {
		if room == nil || room.AdmissionToken == nil {
			return ""
		}
		return *room.AdmissionToken
	}
	joined, err := c.api.JoinWaitingRoomWithResponse(context.Background(), event, bearer)
	require.NoError(c.t, err)
	require.Contains(c.t, []int{http.StatusOK, http.StatusAccepted}, joined.StatusCode())
	admission := token(joined.JSON200)
	require.Eventually(c.t, func() bool {
		if admission != "" {
			return true
		}
		if res, err := c.api.GetWaitingRoomWithResponse(context.Background(), event, bearer); err == nil {
			admission = token(res.JSON200)
		}
		return admission != ""
	}, 30*time.Second, 50*time.Millisecond, "never admitted")
	return admission
}

// holdSeat asks for one seat with a fresh Idempotency-Key.
func (c *cellsClient) holdSeat(buyer, event uuid.UUID, admission, seat string) *client.CreateHoldResponse {
	c.t.Helper()
	res, err := c.api.CreateHoldWithResponse(context.Background(), event,
		&client.CreateHoldParams{IdempotencyKey: uuid.NewString(), XAdmissionToken: admission},
		client.CreateHoldJSONRequestBody{SeatIds: []string{seat}}, client.WithBearer(c.buyerToken(buyer)))
	require.NoError(c.t, err)
	return res
}

func (c *cellsClient) hold(buyer, event uuid.UUID, token string, seat int) uuid.UUID {
	c.t.Helper()
	res := c.holdSeat(buyer, event, token, c.seats(event)[seat])
	require.Equal(c.t, http.StatusAccepted, res.StatusCode())
	id, err := uuid.Parse(res.JSON202.OrderID)
	require.NoError(c.t, err)
	return id
}

// order reads the order as its buyer.
func (c *cellsClient) order(buyer, order uuid.UUID) *client.GetOrderResponse {
	c.t.Helper()
	res, err := c.api.GetOrderWithResponse(context.Background(), order, client.WithBearer(c.buyerToken(buyer)))
	require.NoError(c.t, err)
	return res
}

// payAndWait authorizes the order's PaymentIntent in the sandbox once the
// saga has created it, and waits until the order is ticketed.
func (c *cellsClient) payAndWait(buyer, order uuid.UUID) {
	c.t.Helper()
	var intent string
	require.Eventually(c.t, func() bool {
		o := c.order(buyer, order).JSON200
		if o == nil || o.Payment == nil || o.Payment.PaymentIntentID == nil {
			return false
		}
		intent = *o.Payment.PaymentIntentID
		return intent != ""
	}, 30*time.Second, 20*time.Millisecond, "order %s never got a PaymentIntent", order)
	res, err := c.api.SandboxPaymentIntentWithResponse(context.Background(), intent, client.SandboxAuthorize, client.WithBearer(c.buyerToken(buyer)))
	require.NoError(c.t, err)
	require.Equal(c.t, http.StatusOK, res.StatusCode())
	var last client.OrderBodyStatus
	require.Eventually(c.t, func() bool {
		if o := c.order(buyer, order).JSON200; o != nil {
			last = o.Status
		}
		return last == client.OrderBodyStatusTicketed
	}, 30*time.Second, 20*time.Millisecond, "order %s never got ticketed (last %q)", order, &last)
}
