package simulator

import (
	"cmp"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/boxoffice/boxoffice/client"
	"github.com/google/uuid"

	"boxoffice/platform/auth"
)

// Arrival patterns.
const (
	ArrivalSpike  = "spike"
	ArrivalRamp   = "ramp"
	ArrivalSteady = "steady"
)

// Config configures a simulation.
type Config struct {
	// APIs are the base URLs of the API processes; buyer i uses
	// APIs[i%len(APIs)] for its whole visit. Required.
	APIs []string
	// SharedWaitingRoom says the API processes share one waiting room
	// (Redis); when false each admits on its own and R is summed over
	// them. Defaults to false.
	SharedWaitingRoom bool
	// StripeBase, when set, is the Stripe stand-in (lab/memstripe) the
	// product pays through: buyers confirm their PaymentIntents there with
	// the client secret their order shows, as Stripe.js does. Empty: the
	// buyers authorize or decline through the product's sandbox routes.
	// Defaults to empty.
	StripeBase string
	// JWTSecret signs the organizer and buyer tokens. Required.
	JWTSecret []byte
	// OrganizerID is the organizer the simulator acts as; it must own
	// EventID when that is set, or the onsale signals are unavailable.
	// Defaults to a random one.
	OrganizerID uuid.UUID
	// EventID is an existing event to sell; empty creates one with Seats
	// seats. Defaults to empty.
	EventID string
	// Buyers is how many buyers arrive. Defaults to 1000.
	Buyers int
	// Seats is the size of the created event. Defaults to 100.
	Seats int
	// Arrival is spike, ramp or steady. Defaults to spike.
	Arrival string
	// Duration is the window over which buyers arrive. Defaults to 30s.
	Duration time.Duration
	// PayRatio is the share of buyers with a hold who pay; of the rest,
	// half decline and half walk away so their holds expire. Must be in
	// [0, 1]; the command defaults it to 0.9.
	PayRatio float64
	// Patience is how long a buyer waits in the queue before leaving.
	// Defaults to 10m.
	Patience time.Duration
	// IntentWait bounds the wait for an order's PaymentIntent. Defaults to 2m.
	IntentWait time.Duration
	// FollowTimeout bounds following an order to a final status. Defaults to 10m.
	FollowTimeout time.Duration
	// SettleTimeout bounds the wait, after the last buyer, for walked-away
	// holds to expire. Defaults to 6m.
	SettleTimeout time.Duration
	// RequestTimeout bounds one API request. Defaults to 15s.
	RequestTimeout time.Duration
	// BestAvailable is the share of buyers who ask for the best available
	// seats of the event's first price category
	// (create-best-available-hold) instead of choosing seats from the
	// map. Must be in [0, 1]. Defaults to 0.
	BestAvailable float64
	// Presale, when above 0, runs the onsale in two phases: a presale
	// open from the start, for the share Presale of the buyers, who are
	// given a presale code each (one use, 4 seats) and arrive during it;
	// then, PresaleFor after the start, the general sale, for the others,
	// who arrive over Duration from then on. Must be in [0, 1]; needs an
	// event the run creates (EventID empty). Defaults to 0: one phase.
	Presale float64
	// PresaleFor is how long the presale lasts. Defaults to Duration.
	PresaleFor time.Duration
	// Logger receives warnings. Defaults to discarding them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.Buyers = cmp.Or(c.Buyers, 1000)
	c.Seats = cmp.Or(c.Seats, 100)
	c.Arrival = cmp.Or(c.Arrival, ArrivalSpike)
	c.Duration = cmp.Or(c.Duration, 30*time.Second)
	c.Patience = cmp.Or(c.Patience, 10*time.Minute)
	c.IntentWait = cmp.Or(c.IntentWait, 2*time.Minute)
	c.FollowTimeout = cmp.Or(c.FollowTimeout, 10*time.Minute)
	c.SettleTimeout = cmp.Or(c.SettleTimeout, 6*time.Minute)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, 15*time.Second)
	c.PresaleFor = cmp.Or(c.PresaleFor, c.Duration)
	if c.OrganizerID == uuid.Nil {
		c.OrganizerID = uuid.New()
	}
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	return c
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	switch {
	case len(c.APIs) == 0:
		return errors.New("onsale: at least one API URL is required")
	case len(c.JWTSecret) == 0:
		return errors.New("onsale: the JWT secret is required (BOXOFFICE_JWT_SECRET)")
	case c.Buyers < 1 || c.Seats < 1:
		return errors.New("onsale: buyers and seats must be positive")
	case c.Seats > 100000:
		return errors.New("onsale: at most 100000 seats")
	case c.Arrival != ArrivalSpike && c.Arrival != ArrivalRamp && c.Arrival != ArrivalSteady:
		return fmt.Errorf("onsale: arrival %q: want spike, ramp or steady", c.Arrival)
	case c.PayRatio < 0 || c.PayRatio > 1:
		return errors.New("onsale: pay ratio must be between 0 and 1")
	case c.Duration < 0:
		return errors.New("onsale: duration must not be negative")
	case c.BestAvailable < 0 || c.BestAvailable > 1:
		return errors.New("onsale: best-available share must be between 0 and 1")
	case c.Presale < 0 || c.Presale > 1:
		return errors.New("onsale: presale share must be between 0 and 1")
	case c.Presale > 0 && c.EventID != "":
		return errors.New("onsale: a presale needs an event the run creates")
	case c.EventID != "" && uuid.Validate(c.EventID) != nil:
		return fmt.Errorf("onsale: event id %q is not a UUID", c.EventID)
	}
	return nil
}

// Sim is one simulation run. Create it with New, watch it with Live while
// Run runs.
type Sim struct {
	cfg Config
	// apis make the buyers' requests (the generated client, read and
	// decoded), bounded by RequestTimeout; sses open their order event
	// streams, unbounded, on the same connections.
	apis []*client.ClientWithResponses
	sses []*client.Client
	// ops reads the server's signals and the seat map for the report on
	// connections of its own, as an operator's dashboard would: never
	// queued behind the buyers' requests in this process.
	ops []*client.ClientWithResponses
	// stripe confirms PaymentIntents at Config.StripeBase.
	stripe  *http.Client
	org     client.RequestEditorFn // the organizer's bearer token
	eventID string
	event   uuid.UUID // eventID, as the client's path parameters take it
	// category is the event's first price category: what best-available
	// buyers ask for.
	category string
	seatsN   int
	started  time.Time

	c            counters
	holdLatency  latencies // first hold request to 202, retries included
	holdRequest  latencies // each hold request
	holdConn     latencies // each hold request's wait for a connection
	holdServer   latencies // each hold request, written to its first response byte
	timeToTicket latencies // first hold request to ticketed
	intentWait   latencies // hold 202 to the order showing its PaymentIntent
	payToTicket  latencies // card authorized to ticketed, seen by SSE
	queueWait    latencies
	soldOut      soldOutSignal
	expired      atomic.Int64  // walked-away orders seen final after settling
	lastR        atomic.Uint64 // math.Float64bits

	// decoded are the seat maps buyers have decoded, by ETag: a buyer
	// that receives a map another one already decoded reads its bytes and
	// skips the decoding (45% of this process's CPU in a 5,000-buyer
	// run), so the simulator takes less of the machine it shares with the
	// stack; what each buyer asks of the server is unchanged.
	decodedMu sync.Mutex
	decoded   map[string][]seat

	mu        sync.Mutex
	tickets   map[string][]string // order → seats
	abandoned []*buyer
	errKinds  map[string]int
	series    []Point
}

// New checks cfg and prepares a run.
func New(cfg Config) (*Sim, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 2048,
		MaxConnsPerHost:     4096,
		IdleConnTimeout:     90 * time.Second,
	}
	s := &Sim{cfg: cfg, tickets: map[string][]string{}, errKinds: map[string]int{}, decoded: map[string][]seat{},
		soldOut: soldOutSignal{ch: make(chan struct{})}}
	for _, u := range cfg.APIs {
		u = strings.TrimRight(u, "/")
		api, err := client.NewClientWithResponses(u, client.WithHTTPClient(&http.Client{Transport: tr, Timeout: cfg.RequestTimeout}))
		if err != nil {
			return nil, fmt.Errorf("onsale: API %s: %w", u, err)
		}
		sse, err := client.NewClient(u, client.WithHTTPClient(&http.Client{Transport: tr}))
		if err != nil {
			return nil, fmt.Errorf("onsale: API %s: %w", u, err)
		}
		ops, err := client.NewClientWithResponses(u, client.WithHTTPClient(&http.Client{
			Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4}, Timeout: cfg.RequestTimeout}))
		if err != nil {
			return nil, fmt.Errorf("onsale: API %s: %w", u, err)
		}
		s.apis, s.sses, s.ops = append(s.apis, api), append(s.sses, sse), append(s.ops, ops)
	}
	s.stripe = &http.Client{Transport: tr, Timeout: cfg.RequestTimeout}
	return s, nil
}

// EventID is the event being sold, once Run has created or found it.
func (s *Sim) EventID() string { return s.eventID }

// Run creates the event (unless Config.EventID names one), lets the
// buyers loose, samples the stack every second, waits for walked-away
// holds to expire, and returns the result. It returns an error only when
// the run could not start; buyers' errors are counted in the result.
func (s *Sim) Run(ctx context.Context) (*Result, error) {
	cfg := s.cfg
	orgToken, err := auth.Mint(cfg.JWTSecret, auth.Identity{UserID: uuid.New(), Role: auth.RoleOrganizer, OrganizerID: cfg.OrganizerID}, 4*time.Hour)
	if err != nil {
		return nil, fmt.Errorf("mint organizer token: %w", err)
	}
	s.org = client.WithBearer(orgToken)
	if s.eventID = cfg.EventID; s.eventID == "" {
		if s.eventID, err = s.createEvent(ctx); err != nil {
			return nil, err
		}
	}
	if s.event, err = uuid.Parse(s.eventID); err != nil {
		return nil, fmt.Errorf("event id %q: %w", s.eventID, err)
	}
	m, cats, err := s.seatMap(ctx, s.apis[0], s.org)
	if err != nil {
		return nil, fmt.Errorf("read the seat map: %w", err)
	}
	s.seatsN = len(m)
	if len(cats) > 0 {
		s.category = cats[0].ID
	}
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	presale := int(float64(cfg.Buyers)*cfg.Presale + 0.5)
	var codes []string
	if presale > 0 {
		if codes, err = s.startPresale(ctx, presale); err != nil {
			return nil, err
		}
	}
	s.started = time.Now()

	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { defer close(sampled); s.sample(sampleCtx) }()

	var wg sync.WaitGroup
	// Presale buyers (the first ones) arrive during the presale, the
	// others over Duration once the general sale opens.
	offsets := arrivals(cfg.Arrival, presale, cfg.PresaleFor, rng)
	for _, off := range arrivals(cfg.Arrival, cfg.Buyers-presale, cfg.Duration, rng) {
		if presale > 0 {
			off += cfg.PresaleFor
		}
		offsets = append(offsets, off)
	}
	for i, off := range offsets {
		b := &buyer{sim: s, api: s.apis[i%len(s.apis)], sse: s.sses[i%len(s.sses)], rng: rand.New(rand.NewPCG(rand.Uint64(), uint64(i)))}
		if i < len(codes) {
			b.code = codes[i]
		}
		b.best = b.rng.Float64() < cfg.BestAvailable
		switch r := b.rng.Float64(); {
		case r < cfg.PayRatio:
			b.plan = "pay"
		case r < cfg.PayRatio+(1-cfg.PayRatio)/2:
			b.plan = "decline"
		default:
			b.plan = "abandon"
		}
		wg.Go(func() {
			if sleep(ctx, time.Until(s.started.Add(off))) != nil {
				return
			}
			b.run(ctx)
		})
	}
	wg.Wait()
	buyersDone := time.Since(s.started)
	s.settle(ctx)
	stopSampling()
	<-sampled
	return s.result(context.WithoutCancel(ctx), buyersDone), nil // an interrupted run still counts the seat map
}

// createEvent creates an event of cfg.Seats seats in rows of up to 20,
// front rows first in the seat map.
func (s *Sim) createEvent(ctx context.Context) (string, error) {
	n := int64(s.cfg.Seats)
	per := min(n, 20)
	sections := []client.SectionInput{{Name: "Stalls", Rows: n / per, SeatsPerRow: per, PriceMinor: 8500}}
	if rest := n % per; rest > 0 {
		sections = append(sections, client.SectionInput{Name: "Balcony", Rows: 1, SeatsPerRow: rest, PriceMinor: 4500})
	}
	res, err := s.apis[0].CreateEventWithResponse(ctx, nil, client.CreateEventJSONRequestBody{
		Name: fmt.Sprintf("Onsale simulation %s", time.Now().UTC().Format(time.DateTime)), StartsAt: time.Now().Add(30 * 24 * time.Hour),
		Currency: "eur", Sections: sections,
	}, s.org)
	if err != nil {
		return "", fmt.Errorf("create event: %w", err)
	}
	if res.JSON201 == nil {
		return "", fmt.Errorf("create event: status %d (%s)", res.StatusCode(), client.ProblemOf(res.HTTPResponse, res.Body).Type)
	}
	return res.JSON201.ID, nil
}

// seatMap reads the event's seat map, in the server's order: front first,
// and its price categories.
func (s *Sim) seatMap(ctx context.Context, api *client.ClientWithResponses, auth client.RequestEditorFn) ([]client.SeatBody, []client.CategoryBody, error) {
	res, err := api.ListSeatsWithResponse(ctx, s.event, nil, auth)
	if err != nil {
		return nil, nil, fmt.Errorf("GET /v1/events/{id}/seats: %w", err)
	}
	if res.JSON200 == nil {
		return nil, nil, fmt.Errorf("GET seat map: status %d", res.StatusCode())
	}
	return res.JSON200.Seats, res.JSON200.Categories, nil
}

// startPresale gives the onsale a presale phase open now and a general
// sale opening Config.PresaleFor from now, and returns n presale codes of
// one use and 4 seats each.
func (s *Sim) startPresale(ctx context.Context, n int) ([]string, error) {
	now := time.Now().UTC()
	phases, err := s.apis[0].SetOnsalePhasesWithResponse(ctx, s.event, client.SetOnsalePhasesJSONRequestBody{Phases: []client.OnsalePhaseSpec{
		{Name: "presale", OpensAt: now.Add(-time.Second), Presale: true},
		{Name: "general", OpensAt: now.Add(s.cfg.PresaleFor)},
	}}, s.org)
	if err != nil {
		return nil, fmt.Errorf("set onsale phases: %w", err)
	}
	if phases.JSON200 == nil {
		return nil, fmt.Errorf("set onsale phases: status %d (%s)", phases.StatusCode(), client.ProblemOf(phases.HTTPResponse, phases.Body).Type)
	}
	count := int64(n)
	// The codes are shown once: a key makes a retry of a lost answer
	// return them.
	key := uuid.NewString()
	res, err := s.apis[0].CreatePresaleCodesWithResponse(ctx, s.event, &client.CreatePresaleCodesParams{IdempotencyKey: &key}, client.CreatePresaleCodesJSONRequestBody{
		Phase: "presale", Count: &count, MaxUses: 1, MaxSeats: 4,
	}, s.org)
	if err != nil {
		return nil, fmt.Errorf("create presale codes: %w", err)
	}
	if res.JSON201 == nil {
		return nil, fmt.Errorf("create presale codes: status %d (%s)", res.StatusCode(), client.ProblemOf(res.HTTPResponse, res.Body).Type)
	}
	codes := make([]string, 0, n)
	for _, c := range res.JSON201.Codes {
		codes = append(codes, c.Code)
	}
	return codes, nil
}

// seat is the part of a seat of the map (client.SeatBody) a buyer reads.
// Buyers decode a map nobody has decoded yet thousands of times a run,
// many at once when its ETag changes: decoding two of the five fields as
// the body streams in costs about half the CPU of reading it whole and
// decoding the generated type (ParseListSeatsResponse: 1.0 s against
// 0.55 s of a 1,500-buyer, 3,000-seat run). TestSeatIsPartOfSeatBody
// keeps the two in step.
type seat struct {
	ID     string                `json:"id"`
	Status client.SeatBodyStatus `json:"status"`
}

// acceptGzip asks for the seat map compressed, as a browser does. Set
// by hand, the transport leaves the body compressed: a map some buyer
// already decoded is discarded unread, not decompressed first.
var acceptGzip = client.WithHeader("Accept-Encoding", "gzip")

// seatMap reads the event's seat map as a browser with its own cache
// would: with the ETag of the copy it has as If-None-Match, gzip
// accepted. A 304 or a map some buyer already decoded costs no decoding.
// The request is the generated client's (ListSeats, which returns the
// answer unread); the decoding of a map nobody has decoded yet is the
// buyer's (seat).
func (b *buyer) seatMap(ctx context.Context) ([]seat, error) {
	s := b.sim
	var params client.ListSeatsParams
	if b.etag != "" {
		params.IfNoneMatch = &b.etag
	}
	res, err := b.api.ListSeats(ctx, s.event, &params, b.auth, acceptGzip)
	if err != nil {
		return nil, fmt.Errorf("GET /v1/events/{id}/seats: %w", err)
	}
	defer res.Body.Close()
	etag := res.Header.Get("ETag")
	s.decodedMu.Lock()
	m, ok := s.decoded[etag]
	s.decodedMu.Unlock()
	switch {
	case res.StatusCode == http.StatusNotModified && ok:
		return m, nil
	case res.StatusCode == http.StatusNotModified: // forgotten: ask afresh
		b.etag = ""
		return b.seatMap(ctx)
	case res.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("GET seat map: status %d", res.StatusCode)
	case ok && etag != "":
		_, _ = io.Copy(io.Discard, res.Body)
		b.etag = etag
		return m, nil
	}
	var body io.Reader = res.Body
	if res.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(res.Body)
		if err != nil {
			return nil, fmt.Errorf("seat map: %w", err)
		}
		defer zr.Close()
		body = zr
	}
	var v struct {
		Seats []seat `json:"seats"`
	}
	if err := json.NewDecoder(body).Decode(&v); err != nil {
		return nil, fmt.Errorf("decode seat map: %w", err)
	}
	seats := v.Seats
	if etag != "" {
		s.decodedMu.Lock()
		if len(s.decoded) >= 256 {
			clear(s.decoded)
		}
		s.decoded[etag] = seats
		s.decodedMu.Unlock()
		b.etag = etag
	}
	return seats, nil
}

// noteError counts an error by its kind (never by its text, which may
// carry ids).
func (s *Sim) noteError(err error) {
	s.c.errors.Add(1)
	kind := "other"
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		kind = "timeout"
	case strings.Contains(err.Error(), "connection refused"):
		kind = "connection refused"
	case strings.Contains(err.Error(), "connection reset"), strings.Contains(err.Error(), "EOF"):
		kind = "connection reset"
	}
	s.mu.Lock()
	s.errKinds[kind]++
	s.mu.Unlock()
}

// noteStatus counts an unexpected HTTP status of a route.
func (s *Sim) noteStatus(route string, status int) {
	s.c.errors.Add(1)
	s.mu.Lock()
	s.errKinds[fmt.Sprintf("%s %d", route, status)]++
	s.mu.Unlock()
}

func (s *Sim) recordTickets(orderID string, seatIDs []string) {
	s.mu.Lock()
	s.tickets[orderID] = seatIDs
	s.mu.Unlock()
}

func (s *Sim) trackAbandoned(b *buyer) {
	s.mu.Lock()
	s.abandoned = append(s.abandoned, b)
	s.mu.Unlock()
}

func (s *Sim) finish(b *buyer) {
	s.c.done.Add(1)
	if b.outcome == outcomeError && b.lastErr != nil {
		s.cfg.Logger.Debug("buyer ended with an error", "error", b.lastErr.Error())
	}
}

// settle waits until every walked-away order has reached a final status
// (its hold expired) or SettleTimeout passes.
func (s *Sim) settle(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.SettleTimeout)
	defer cancel()
	s.mu.Lock()
	pending := append([]*buyer(nil), s.abandoned...)
	s.mu.Unlock()
	total := len(pending)
	for len(pending) > 0 {
		var still []*buyer
		for _, b := range pending {
			res, err := b.api.GetOrderWithResponse(ctx, b.order, b.auth)
			if err != nil || res.JSON200 == nil || !finalStatuses[string(res.JSON200.Status)] {
				still = append(still, b)
			}
		}
		pending = still
		if len(pending) == 0 || sleep(ctx, 2*time.Second) != nil {
			break
		}
	}
	s.expired.Store(int64(total - len(pending)))
	if len(pending) > 0 {
		s.cfg.Logger.Warn("walked-away orders not final when settling ended", "orders", len(pending))
	}
}

// soldOutSignal is the event page's "sold out" banner: set once, seen at
// once by every buyer, including those waiting between two polls of the
// waiting room (a buyer does not sit out its poll interval on a page
// that already says sold out).
type soldOutSignal struct {
	once sync.Once
	ch   chan struct{}
}

// Store sets the signal; only true sets it (it is never cleared).
func (s *soldOutSignal) Store(v bool) {
	if v {
		s.once.Do(func() { close(s.ch) })
	}
}

// Load reports whether the signal is set.
func (s *soldOutSignal) Load() bool {
	select {
	case <-s.ch:
		return true
	default:
		return false
	}
}

// Done is closed when the signal is set.
func (s *soldOutSignal) Done() <-chan struct{} { return s.ch }
