package waitingroom

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"boxoffice/domain/catalog"
	"boxoffice/domain/purchase"
	"boxoffice/platform/admission"
	"boxoffice/platform/fault"
	"boxoffice/platform/promreg"
)

// ErrEventNotFound is returned for an event that does not exist. It is
// catalog.ErrNotFound, the one "event not found" of every package.
var ErrEventNotFound = catalog.ErrNotFound

// ErrNoSettings is returned by the organizer operations of a Room built
// without onsale settings storage.
var ErrNoSettings = fault.New(fault.CodeNotFound, "onsale settings are not stored")

// EventSource looks events up; *catalog.Catalog is one. It returns
// catalog.ErrNotFound for an unknown event.
type EventSource interface {
	Event(ctx context.Context, id uuid.UUID) (catalog.Event, error)
}

// DefaultPerIPLimit is Limits.PerIP when RoomConfig leaves it zero (and
// the default of BOXOFFICE_WAITINGROOM_IP_LIMIT): waiting-room requests per
// second per client address and event.
const DefaultPerIPLimit = 200

// RoomConfig configures NewRoom.
type RoomConfig struct {
	// Store keeps queues and admissions. Required.
	Store Store
	// Signer signs admission tokens. Required.
	Signer *admission.Signer
	// Events looks events up (cached here for a minute). Required.
	Events EventSource
	// Onsales stores organizers' settings (cached here for
	// SettingsTTL). Defaults to none: every onsale is open, uncapped,
	// unlimited, and the organizer operations return ErrNoSettings.
	Onsales *Onsales
	// Controller sets R. Defaults to a fixed R of 200 per second.
	Controller *Controller
	// Process names this process among those sharing Store, for
	// Store.ShareRate. Defaults to a random name.
	Process string
	// RateShareInterval is how often this process reports its
	// controller's R to the cell and reads the cell's (Store.ShareRate):
	// every process admits from the same queues, so the cell admits at
	// the lowest R of its processes, and a cut by one process's signals
	// is a cut for all within this interval. A report counts for three
	// intervals; with no fresh cell rate (the store unreachable) a
	// process admits at its own R. Defaults to 500ms, the controller's
	// reading interval.
	RateShareInterval time.Duration
	// Limits are the per-second request limits per buyer and per client
	// address, per event. Defaults to 5 per buyer and 200 per address; a
	// negative field disables that limit.
	Limits Limits
	// BurstSeconds is how many seconds of R may be admitted at once.
	// Defaults to 1.
	BurstSeconds float64
	// AdmitInterval is how often queued buyers are admitted. Defaults to
	// 100ms.
	AdmitInterval time.Duration
	// RevocationRefresh is how often the in-process copy of the revoked
	// admissions is refreshed from the store. Defaults to 1s.
	RevocationRefresh time.Duration
	// SettingsTTL is how long settings are cached. Defaults to 1s.
	SettingsTTL time.Duration
	// HoldLatency receives the latency of every hold, for the
	// controller. Defaults to none.
	HoldLatency *LatencyWindow
	// InventoryFunc counts an event's held and sold seats (a hint, at
	// most a second or so old: see InventoryFrom). While no seat is
	// available, nobody is admitted, neither from the queue nor at once on
	// joining: an admitted buyer could only look at a full seat map and
	// leave, and thousands of them at once are a load that slows every
	// hold. While none is held either, the onsale is sold out and queued
	// buyers are told so (View.SoldOut); they keep their place. When seats
	// come back (an expiry, a cancel, a failed payment, a refund that
	// resells), the admitter admits about as many queued buyers as came
	// back, in queue order: while seats are scarce (fewer than R admits in
	// ClaimWindow), each admission (from the queue, or at once on
	// joining) counts against the seats left for ClaimWindow, whichever
	// process made it. Defaults to none: admission ignores seats.
	InventoryFunc func(ctx context.Context, eventID uuid.UUID) (catalog.Inventory, error)
	// ClaimWindow is how long an admission counts against the seats left
	// while they are scarce: about the time an admitted buyer takes to
	// hold. Defaults to 20s.
	ClaimWindow time.Duration
	// Logger logs admitter and store failures. Required.
	Logger *slog.Logger
	// Registerer receives the waiting room's metrics. Defaults to none.
	Registerer prometheus.Registerer
	// Now is the clock. Defaults to time.Now.
	Now func() time.Time
}

// Room is the waiting room of every event of the cell: buyers join and
// poll it, the admitter lets them through at R, holds check revocations and
// the per-buyer seat limit against it, and organizers set its settings.
type Room struct {
	cfg    RoomConfig
	logger *slog.Logger

	mu     sync.Mutex
	cache  map[uuid.UUID]*cached
	loads  singleflight.Group
	demand bool
	// cellRate is the cell's R as Store.ShareRate last returned it, at
	// cellRateAt; zero before the first.
	cellRate   float64
	cellRateAt time.Time

	revMu   sync.RWMutex
	revoked map[uuid.UUID]time.Time

	// phases caches each event's onsale phases for SettingsTTL, so that a
	// join outside a presale costs no PostgreSQL round trip.
	phaseMu sync.Mutex
	phases  map[uuid.UUID]cachedPhases

	admitted prometheus.Counter
	requests *prometheus.CounterVec
}

type cachedPhases struct {
	phases []PhaseInfo
	at     time.Time
}

// phasesOf returns the event's phases, cached for SettingsTTL; when they
// cannot be read, the last ones read if any (so a database outage does
// not stop joins outside a presale), else the error.
func (r *Room) phasesOf(ctx context.Context, eventID uuid.UUID, now time.Time) ([]PhaseInfo, error) {
	r.phaseMu.Lock()
	c, ok := r.phases[eventID]
	r.phaseMu.Unlock()
	if ok && now.Sub(c.at) < r.cfg.SettingsTTL {
		return c.phases, nil
	}
	phases, err := r.cfg.Onsales.Phases(ctx, eventID)
	if err != nil {
		if ok {
			return c.phases, nil
		}
		return nil, err
	}
	r.phaseMu.Lock()
	if r.phases == nil {
		r.phases = map[uuid.UUID]cachedPhases{}
	}
	r.phases[eventID] = cachedPhases{phases: phases, at: now}
	r.phaseMu.Unlock()
	return phases, nil
}

type cached struct {
	event      catalog.Event
	found      bool
	eventAt    time.Time
	settings   Settings
	settingsAt time.Time
}

// NewRoom returns a Room; call Run to admit queued buyers.
func NewRoom(cfg RoomConfig) *Room {
	if cfg.Controller == nil {
		cfg.Controller = NewController(ControllerConfig{Logger: cfg.Logger})
	}
	switch {
	case cfg.Limits.PerUser == 0:
		cfg.Limits.PerUser = 5
	case cfg.Limits.PerUser < 0:
		cfg.Limits.PerUser = 0
	}
	switch {
	case cfg.Limits.PerIP == 0:
		cfg.Limits.PerIP = DefaultPerIPLimit
	case cfg.Limits.PerIP < 0:
		cfg.Limits.PerIP = 0
	}
	if cfg.BurstSeconds <= 0 {
		cfg.BurstSeconds = 1
	}
	if cfg.AdmitInterval <= 0 {
		cfg.AdmitInterval = 100 * time.Millisecond
	}
	if cfg.RateShareInterval <= 0 {
		cfg.RateShareInterval = 500 * time.Millisecond
	}
	if cfg.Process == "" {
		cfg.Process = uuid.NewString()
	}
	if cfg.RevocationRefresh <= 0 {
		cfg.RevocationRefresh = time.Second
	}
	if cfg.SettingsTTL <= 0 {
		cfg.SettingsTTL = time.Second
	}
	if cfg.ClaimWindow <= 0 {
		cfg.ClaimWindow = 20 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Room{
		cfg: cfg, logger: cfg.Logger.With("component", "waiting_room"),
		cache: map[uuid.UUID]*cached{}, revoked: map[uuid.UUID]time.Time{},
		admitted: promreg.Counter(cfg.Registerer, "boxoffice_waitingroom_admitted_total",
			"Buyers admitted from a queue by the admitter (not counting those admitted at once on joining)."),
		requests: promreg.CounterVec(cfg.Registerer, "boxoffice_waitingroom_requests_total",
			"Waiting-room joins and polls by outcome: queued, admitted, revoked, none, rate_limited, unavailable.", "outcome"),
	}
}

// Controller returns the room's release controller.
func (r *Room) Controller() *Controller { return r.cfg.Controller }

// HasDemand reports whether buyers were queued at the admitter's last
// pass: the controller's DemandFunc.
func (r *Room) HasDemand() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.demand
}

// Event describes an event as the waiting room sees it.
type Event struct {
	ID          uuid.UUID
	OrganizerID uuid.UUID
	Cell        string
	Settings    Settings
}

// event returns the event and its settings from the cache, loading what
// is stale. Unknown events are remembered for a minute as well, so random
// ids do not reach PostgreSQL on every request.
func (r *Room) event(ctx context.Context, id uuid.UUID) (Event, error) {
	now := time.Now()
	r.mu.Lock()
	c := r.cache[id]
	r.mu.Unlock()
	if c != nil && now.Sub(c.eventAt) < time.Minute && (!c.found || now.Sub(c.settingsAt) < r.cfg.SettingsTTL) {
		if !c.found {
			return Event{}, ErrEventNotFound
		}
		return Event{ID: id, OrganizerID: c.event.OrganizerID, Cell: c.event.PurchaseCell, Settings: c.settings}, nil
	}
	v, err, _ := r.loads.Do(id.String(), func() (any, error) {
		// The load is shared by every request waiting on it: it must not
		// end when the request that started it goes away.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		ev, err := r.cfg.Events.Event(ctx, id)
		found := err == nil
		if err != nil && !errors.Is(err, catalog.ErrNotFound) {
			return nil, fmt.Errorf("look up event: %w", err)
		}
		var s Settings
		if found && r.cfg.Onsales != nil {
			if s, err = r.cfg.Onsales.Get(ctx, id); err != nil {
				return nil, err
			}
		}
		nc := &cached{event: ev, found: found, eventAt: time.Now(), settings: s, settingsAt: time.Now()}
		r.remember(id, nc)
		return nc, nil
	})
	if err != nil {
		if c == nil || !c.found {
			// Nothing cached to serve: the buyer retries after Retry-After.
			return Event{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		// PostgreSQL did not answer: keep serving what is cached, so the
		// waiting room outlives a database blip.
		r.logger.WarnContext(ctx, "reload onsale settings; serving the cached ones", "event_id", id, "error", err.Error())
		stale := *c
		stale.settingsAt = time.Now() // retry after SettingsTTL, not on every request
		r.remember(id, &stale)
		return Event{ID: id, OrganizerID: c.event.OrganizerID, Cell: c.event.PurchaseCell, Settings: c.settings}, nil
	}
	c = v.(*cached)
	if !c.found {
		return Event{}, ErrEventNotFound
	}
	return Event{ID: id, OrganizerID: c.event.OrganizerID, Cell: c.event.PurchaseCell, Settings: c.settings}, nil
}

func (r *Room) remember(id uuid.UUID, c *cached) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.cache) >= 100_000 {
		clear(r.cache)
	}
	r.cache[id] = c
}

// rate returns the event's R: the controller's, capped by the organizer.
func (r *Room) rate(s Settings) float64 {
	rate := r.cfg.Controller.Rate()
	r.mu.Lock()
	if r.cellRate > 0 && r.cfg.Now().Sub(r.cellRateAt) <= r.rateShareTTL() {
		rate = min(rate, r.cellRate)
	}
	r.mu.Unlock()
	if s.MaxRate > 0 {
		rate = min(rate, float64(s.MaxRate))
	}
	return rate
}

// rateShareTTL is how long a report of R counts, this process's and the
// others'.
func (r *Room) rateShareTTL() time.Duration { return 3 * r.cfg.RateShareInterval }

// ShareRate reports this process's R to the cell and keeps the cell's R
// for admission (see RoomConfig.RateShareInterval). Run calls it every
// RateShareInterval.
func (r *Room) ShareRate(ctx context.Context) error {
	now := r.cfg.Now()
	cell, err := r.cfg.Store.ShareRate(ctx, ShareRateParams{
		Process: r.cfg.Process, Rate: r.cfg.Controller.Rate(), Now: now, TTL: r.rateShareTTL(),
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.cellRate, r.cellRateAt = cell, now
	r.mu.Unlock()
	return nil
}

// Limits are the per-second request limits this room applies to each
// buyer and client address.
func (r *Room) Limits() Limits { return r.cfg.Limits }

func (r *Room) burst(rate float64) float64 { return max(1, math.Floor(rate*r.cfg.BurstSeconds)) }

// View is a buyer's place in an event's waiting room.
type View struct {
	Status Status
	Phase  Phase
	// Position is 1 for the next buyer to be admitted (queued only).
	Position int64
	// EstimatedWait is Position at the current R (queued, open only).
	EstimatedWait time.Duration
	// Token is set once admitted; ExpiresAt is when the admission expires
	// (admitted, or revoked: the buyer may join afresh after it).
	Token     string
	ExpiresAt time.Time
	// RetryAfter is set when rate limited.
	RetryAfter time.Duration
	// Used is how many requests the buyer made in this second against
	// Limits().PerUser, this one included (0 when that limit is off): what
	// the RateLimit header tells a client it has left.
	Used int
	// PollAfter is when a queued buyer should ask again (queued only):
	// see PollAfter.
	PollAfter time.Duration
	OpensAt   *time.Time
	// SoldOut is set while the onsale is open and no seat is available or
	// held (see RoomConfig.InventoryFunc): a queued buyer keeps their
	// place and is admitted if seats come back.
	SoldOut bool
}

// Poll hints: a queued buyer is told to poll again after half of their
// estimated wait, between MinPollAfter and MaxPollAfter.
const (
	MinPollAfter = time.Second
	MaxPollAfter = 30 * time.Second
)

// PollAfter is how long a queued buyer should wait before polling again:
// half their estimated wait (position ÷ rate) while the onsale is open, so
// a buyer far back polls about every MaxPollAfter and one near the front
// every MinPollAfter, and the polls of a queue cost about
// queue length ÷ MaxPollAfter requests a second rather than one per buyer
// per second. Halving the estimate each time bounds how late a buyer
// learns of their admission when R rises: at most half of what they had
// left to wait, and never more than MaxPollAfter. Before a scheduled
// opening it is the time to the opening (so nobody polls a closed room
// often, and everyone polls right after it opens), and MaxPollAfter
// while paused or while R is zero.
func PollAfter(phase Phase, position int64, rate float64, untilOpen time.Duration) time.Duration {
	var d time.Duration
	switch {
	case phase == PhasePre:
		d = untilOpen
	case phase == PhaseOpen && rate > 0:
		d = time.Duration(float64(position) / rate / 2 * float64(time.Second))
	default:
		d = MaxPollAfter
	}
	return min(MaxPollAfter, max(MinPollAfter, d.Round(time.Second)))
}

// Join enters the buyer in the event's waiting room, or returns where they
// already are (StatusRevoked, without a token, while a revoked admission
// lasts). Returns ErrEventNotFound, or an error wrapping
// ErrUnavailable while the store is unreachable (nobody is admitted).
func (r *Room) Join(ctx context.Context, userID, eventID uuid.UUID, ip string) (View, error) {
	return r.JoinWithCode(ctx, userID, eventID, ip, "")
}

// JoinWithCode is Join with the buyer's presale code: while a presale
// phase is in force (InForce, of the phases cached for SettingsTTL;
// Onsales.Redeem), a buyer who has not redeemed one of
// its codes redeems code first, and without a valid one is refused with
// ErrPresaleCode, having joined nothing. Outside a presale code is
// ignored.
//
// A presale join is charged to the buyer's and the address's request
// budgets (Limits) before the code is checked, and once: a buyer over
// either budget gets StatusLimited without the code being looked at, so
// guessing codes goes no faster than the per-buyer limit, and a wrong
// guess costs PostgreSQL nothing once the budget is spent.
func (r *Room) JoinWithCode(ctx context.Context, userID, eventID uuid.UUID, ip, code string) (View, error) {
	if r.cfg.Onsales != nil {
		now := r.cfg.Now()
		phases, err := r.phasesOf(ctx, eventID, now)
		if err != nil {
			return View{}, err
		}
		if ph, ok := InForce(phases, now); ok && ph.Presale {
			// The charge is a poll whose outcome is counted only when no
			// join follows it: then the join is the request's outcome.
			charged, err := r.enter(ctx, userID, eventID, ip, entering{charge: true})
			if err != nil || charged.Status == StatusLimited {
				r.count(charged.Status, err)
				return charged, err
			}
			if err := r.cfg.Onsales.Redeem(ctx, eventID, ph.ID, userID, code); err != nil {
				r.count(charged.Status, nil)
				return View{}, err
			}
			v, err := r.enter(ctx, userID, eventID, ip, entering{join: true, count: true})
			v.Used = charged.Used
			return v, err
		}
	}
	return r.enter(ctx, userID, eventID, ip, entering{join: true, charge: true, count: true})
}

// Phases returns the event's onsale phases in opening order (none without
// a settings store).
func (r *Room) Phases(ctx context.Context, eventID uuid.UUID) ([]PhaseInfo, error) {
	if r.cfg.Onsales == nil {
		return nil, nil
	}
	return r.cfg.Onsales.Phases(ctx, eventID)
}

// SetPhases is Onsales.SetPhases; ErrNoSettings without a settings store.
func (r *Room) SetPhases(ctx context.Context, eventID uuid.UUID, specs []PhaseSpec) ([]PhaseInfo, error) {
	if r.cfg.Onsales == nil {
		return nil, ErrNoSettings
	}
	phases, err := r.cfg.Onsales.SetPhases(ctx, eventID, specs)
	if err == nil {
		// This process sees the change at once; the others within
		// SettingsTTL (and holds at once: hold_reserve reads the table).
		r.phaseMu.Lock()
		delete(r.phases, eventID)
		r.phaseMu.Unlock()
	}
	return phases, err
}

// CreateCodes is Onsales.CreateCodes; ErrNoSettings without a settings
// store.
func (r *Room) CreateCodes(ctx context.Context, eventID uuid.UUID, spec CodeSpec) ([]Code, error) {
	if r.cfg.Onsales == nil {
		return nil, ErrNoSettings
	}
	return r.cfg.Onsales.CreateCodes(ctx, eventID, spec)
}

// CreateCodesTx is Onsales.CreateCodesTx, in the caller's transaction on
// the room's database; ErrNoSettings without a settings store.
func (r *Room) CreateCodesTx(ctx context.Context, tx pgx.Tx, eventID uuid.UUID, spec CodeSpec) ([]Code, error) {
	if r.cfg.Onsales == nil {
		return nil, ErrNoSettings
	}
	return r.cfg.Onsales.CreateCodesTx(ctx, tx, eventID, spec)
}

// Poll returns where the buyer is (StatusNone when they never joined or
// their admission expired, StatusRevoked without a token when it was
// revoked, as Revoked sees it). Errors as Join.
func (r *Room) Poll(ctx context.Context, userID, eventID uuid.UUID, ip string) (View, error) {
	return r.enter(ctx, userID, eventID, ip, entering{charge: true, count: true})
}

// count counts one request in boxoffice_waitingroom_requests_total: by
// the status it answered, or as unavailable when the store was; another
// error is not counted.
func (r *Room) count(status Status, err error) {
	switch {
	case errors.Is(err, ErrUnavailable):
		r.requests.WithLabelValues("unavailable").Inc()
	case err == nil:
		r.requests.WithLabelValues(string(status)).Inc()
	}
}

// entering says what enter does with a request.
type entering struct {
	// join joins the buyer, else polls.
	join bool
	// charge counts the request against the buyer's and the address's
	// budgets (Limits), which a request already charged must not be twice.
	charge bool
	// count counts its outcome in boxoffice_waitingroom_requests_total,
	// which one request must not be twice.
	count bool
}

// enter joins or polls the buyer, as how says.
func (r *Room) enter(ctx context.Context, userID, eventID uuid.UUID, ip string, how entering) (View, error) {
	ev, err := r.event(ctx, eventID)
	if err != nil {
		return View{}, err
	}
	now := r.cfg.Now()
	phase := ev.Settings.Phase(now)
	rate := r.rate(ev.Settings)
	p := JoinParams{
		EventID: eventID, UserID: userID, IP: ip, Now: now, Limits: r.cfg.Limits,
		Phase: phase, Rate: rate, Burst: r.burst(rate), TTL: r.cfg.Signer.TTL(),
		ClaimWindow: r.cfg.ClaimWindow,
	}
	if !how.charge {
		p.Limits = Limits{}
	}
	inv, known, _ := r.inventory(ctx, eventID)
	var e Entry
	if how.join {
		switch {
		case known && inv.Available() == 0:
			// No seat to hold: queue the buyer rather than admit at once
			// (an empty bucket admits nobody and is left as it is).
			p.Rate, p.Burst = 0, 0
		case known:
			// Few seats: admitted at once only while the recent
			// admissions leave one.
			p.Seats = r.seatBudget(inv, rate)
		}
		p.JTI = uuid.New()
		p.PreScore = preScore()
		e, err = r.cfg.Store.Join(ctx, p)
	} else {
		e, err = r.cfg.Store.Poll(ctx, p)
	}
	if err != nil {
		if how.count {
			r.count("", err)
		}
		return View{}, err
	}
	if e.Status == StatusAdmitted && r.Revoked(e.Admission.JTI) {
		// The answer holds give: the token would be refused.
		e.Status = StatusRevoked
	}
	if how.count {
		r.count(e.Status, nil)
	}
	v := View{Status: e.Status, Phase: phase, OpensAt: ev.Settings.OpensAt, RetryAfter: e.RetryAfter, Used: e.Used,
		SoldOut: phase == PhaseOpen && known && inv.SoldOut()}
	switch e.Status {
	case StatusRevoked:
		v.ExpiresAt = e.Admission.ExpiresAt.Truncate(time.Second)
	case StatusQueued:
		v.Position = e.Ahead + 1
		if v.SoldOut {
			// Nothing to wait for but a resale: no estimate, rare polls.
			v.PollAfter = MaxPollAfter
			break
		}
		if phase == PhaseOpen && known && v.Position > int64(inv.Available()) {
			// More buyers are ahead than seats are left to hold (none
			// at all when every seat is held): this buyer is admitted
			// only once holds end and give seats back, whatever R is —
			// each admission counts against the seats left (seatBudget),
			// and each buyer ahead takes a seat at least. So their place
			// moves at rate 0: no estimate, polls every MaxPollAfter.
			// Estimated at R, which the controller raises while the
			// cell is idle, the front of a long queue polls every
			// second or two for as long as a last seat or two lingers:
			// in the 20,000-buyer onsale, 18,000 buyers behind the last
			// few seats made about 4,000 polls a second for two minutes
			// after the sale, most of the API's CPU and the buyers'.
			rate = 0
		}
		if phase == PhaseOpen && rate > 0 {
			v.EstimatedWait = time.Duration(float64(v.Position) / rate * float64(time.Second))
		}
		var untilOpen time.Duration
		if ev.Settings.OpensAt != nil {
			untilOpen = ev.Settings.OpensAt.Sub(now)
		}
		v.PollAfter = PollAfter(phase, v.Position, rate, untilOpen)
	case StatusAdmitted:
		v.ExpiresAt = e.Admission.ExpiresAt.Truncate(time.Second)
		v.Token, err = r.cfg.Signer.Sign(admission.Claims{
			ID: e.Admission.JTI, UserID: userID, EventID: eventID, Cell: ev.Cell,
			IssuedAt: e.Admission.IssuedAt, ExpiresAt: e.Admission.ExpiresAt,
		})
		if err != nil {
			return View{}, err
		}
	}
	return v, nil
}

// inventory is InventoryFunc's answer; known is false when there is none
// or it fails, so that a seat count that cannot be read never stops an
// onsale (admission goes on as if seats were plenty). The admitter reports
// the error (Run logs it).
func (r *Room) inventory(ctx context.Context, eventID uuid.UUID) (inv catalog.Inventory, known bool, err error) {
	if r.cfg.InventoryFunc == nil {
		return catalog.Inventory{}, false, nil
	}
	inv, err = r.cfg.InventoryFunc(ctx, eventID)
	if err != nil {
		return catalog.Inventory{}, false, fmt.Errorf("count seats: %w", err)
	}
	return inv, true, nil
}

// seatBudget is the Seats bound of a join or an admitter pass: the seats
// available while they are scarce (no more than R admits in
// ClaimWindow), else 0 (no bound: the bucket alone paces admission).
func (r *Room) seatBudget(inv catalog.Inventory, rate float64) int {
	if left := inv.Available(); float64(left) <= rate*r.cfg.ClaimWindow.Seconds() {
		return left
	}
	return 0
}

// preScore draws a pre-queue score uniformly from [0, 2^52) with
// crypto/rand: the pre-queue's order is a uniformly random permutation.
func preScore() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return binary.LittleEndian.Uint64(b[:]) & (preScoreSpan - 1)
}

// Revoke revokes an admission until it expires: holds with its token are
// refused from now on in this process, and in others within
// RevocationRefresh.
func (r *Room) Revoke(ctx context.Context, jti uuid.UUID, expiresAt time.Time) error {
	if err := r.cfg.Store.Revoke(ctx, jti, expiresAt); err != nil {
		return err
	}
	r.revMu.Lock()
	r.revoked[jti] = expiresAt
	r.revMu.Unlock()
	return nil
}

// RevokeBuyer revokes the buyer's current admission to the event, if they
// have one, and reports whether they had. Returns an error wrapping
// ErrUnavailable while the store is unreachable.
func (r *Room) RevokeBuyer(ctx context.Context, eventID, userID uuid.UUID) (bool, error) {
	e, err := r.cfg.Store.Poll(ctx, JoinParams{EventID: eventID, UserID: userID, Now: r.cfg.Now()})
	if err != nil || e.Status != StatusAdmitted {
		return false, err
	}
	return true, r.Revoke(ctx, e.Admission.JTI, e.Admission.ExpiresAt)
}

// Revoked reports whether the admission jti was revoked, from the
// in-process copy of the revocations: holds never wait for Redis, and keep
// working on the last copy while Redis is down.
func (r *Room) Revoked(jti uuid.UUID) bool {
	r.revMu.RLock()
	defer r.revMu.RUnlock()
	_, ok := r.revoked[jti]
	return ok
}

// RefreshRevocations replaces the in-process copy of the revocations with
// the store's. On error the old copy stays.
func (r *Room) RefreshRevocations(ctx context.Context) error {
	got, err := r.cfg.Store.Revoked(ctx, r.cfg.Now())
	if err != nil {
		return err
	}
	r.revMu.Lock()
	defer r.revMu.Unlock()
	now := r.cfg.Now()
	for j, exp := range r.revoked { // local revocations not yet seen in the store
		if _, ok := got[j]; !ok && exp.After(now) {
			got[j] = exp
		}
	}
	r.revoked = got
	return nil
}

// ObserveHold feeds a hold's latency to the controller's signals.
func (r *Room) ObserveHold(d time.Duration) {
	if r.cfg.HoldLatency != nil {
		r.cfg.HoldLatency.Observe(d)
	}
}

// CheckoutRules returns the event's per-buyer seat limit and hold
// lifetime from the cached onsale settings, zero for none (or an unknown
// event: the hold itself answers 404). The hold passes them to its
// transaction (purchase.HoldParams), the one place that counts the
// buyer's seats, under a lock that concurrent holds of the buyer share.
func (r *Room) CheckoutRules(ctx context.Context, eventID uuid.UUID) (purchase.CheckoutRules, error) {
	ev, err := r.event(ctx, eventID)
	switch {
	case errors.Is(err, ErrEventNotFound):
		return purchase.CheckoutRules{}, nil
	case err != nil:
		return purchase.CheckoutRules{}, err
	case r.cfg.Onsales == nil:
		return purchase.CheckoutRules{}, nil
	}
	return purchase.CheckoutRules{SeatLimit: max(ev.Settings.SeatLimit, 0), HoldTTL: ev.Settings.HoldTTL}, nil
}

// Onsale is an onsale's state as its organizer sees it.
type Onsale struct {
	Event    Event
	Phase    Phase
	Rate     float64
	Control  ControllerState
	Queued   int64
	QueueErr error
}

// Onsale returns the event's onsale state, reading its settings afresh.
// Returns ErrEventNotFound, ErrNoSettings.
func (r *Room) Onsale(ctx context.Context, eventID uuid.UUID) (Onsale, error) {
	if r.cfg.Onsales == nil {
		return Onsale{}, ErrNoSettings
	}
	r.forget(eventID)
	ev, err := r.event(ctx, eventID)
	if err != nil {
		return Onsale{}, err
	}
	o := Onsale{Event: ev, Phase: ev.Settings.Phase(r.cfg.Now()), Rate: r.rate(ev.Settings), Control: r.cfg.Controller.State()}
	o.Queued, o.QueueErr = r.cfg.Store.QueueLength(ctx, eventID)
	return o, nil
}

// UpdateOnsale applies change to the event's settings and returns the new
// state. Returns ErrEventNotFound, ErrNoSettings.
func (r *Room) UpdateOnsale(ctx context.Context, eventID uuid.UUID, change func(*Settings)) (Onsale, error) {
	if r.cfg.Onsales == nil {
		return Onsale{}, ErrNoSettings
	}
	if _, err := r.event(ctx, eventID); err != nil {
		return Onsale{}, err
	}
	if _, err := r.cfg.Onsales.Update(ctx, eventID, change); err != nil {
		return Onsale{}, err
	}
	return r.Onsale(ctx, eventID)
}

func (r *Room) forget(eventID uuid.UUID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.cache, eventID)
}

// Run admits queued buyers every AdmitInterval and refreshes the revocations
// every RevocationRefresh, until ctx is done. Store failures are logged (at
// most every 10 seconds) and retried on the next tick: when Redis comes
// back, admission resumes by itself.
func (r *Room) Run(ctx context.Context) error {
	admit := time.NewTicker(r.cfg.AdmitInterval)
	defer admit.Stop()
	refresh := time.NewTicker(r.cfg.RevocationRefresh)
	defer refresh.Stop()
	share := time.NewTicker(r.cfg.RateShareInterval)
	defer share.Stop()
	var lastLog time.Time
	logErr := func(msg string, err error) {
		if time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			r.logger.ErrorContext(ctx, msg, "error", err.Error())
		}
	}
	_ = r.RefreshRevocations(ctx)
	_ = r.ShareRate(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-share.C:
			if err := r.ShareRate(ctx); err != nil && ctx.Err() == nil {
				logErr("share admission rate", err)
			}
		case <-refresh.C:
			if err := r.RefreshRevocations(ctx); err != nil && ctx.Err() == nil {
				logErr("refresh revocations", err)
			}
		case <-admit.C:
			if err := r.AdmitOnce(ctx); err != nil && ctx.Err() == nil {
				logErr("admit queued buyers", err)
			}
		}
	}
}

// AdmitOnce runs one pass of the admitter over every event with buyers
// queued whose onsale is open, and returns the first error.
//
// Buyers queued for an event the catalog does not know (deleted, or
// another deployment's on a shared Redis) are not demand: counted, they
// let R rise on an idle cell, which then admits its next onsale's first
// seconds at a rate nothing measured (the 20,000-buyer onsale started at
// R 490 instead of its initial 50, after 20 s of "demand" from an earlier
// run's queue).
func (r *Room) AdmitOnce(ctx context.Context) error {
	events, err := r.cfg.Store.ActiveEvents(ctx)
	if err != nil {
		return err
	}
	var first error
	demand := false
	for _, id := range events {
		_, err := r.AdmitEvent(ctx, id)
		if !errors.Is(err, ErrEventNotFound) {
			demand = true
		}
		if err != nil && first == nil {
			first = err
		}
	}
	r.mu.Lock()
	r.demand = demand
	r.mu.Unlock()
	return first
}

// AdmitEvent admits as many of the event's queued buyers as its R allows
// now, if its onsale is open, and returns them in queue order. Run calls it
// for every event with buyers queued; a simulation calls it to learn whom
// it admitted.
func (r *Room) AdmitEvent(ctx context.Context, id uuid.UUID) ([]uuid.UUID, error) {
	ev, err := r.event(ctx, id)
	if err != nil || ev.Settings.Phase(r.cfg.Now()) != PhaseOpen {
		return nil, err
	}
	rate := r.rate(ev.Settings)
	burst := r.burst(rate)
	seats := 0
	inv, known, seatsErr := r.inventory(ctx, id)
	if known {
		if inv.Available() == 0 {
			return nil, nil
		}
		seats = r.seatBudget(inv, rate)
	}
	users, err := r.cfg.Store.Admit(ctx, AdmitParams{
		EventID: id, Now: r.cfg.Now(), Rate: rate, Burst: burst, TTL: r.cfg.Signer.TTL(), Max: int(burst),
		Seats: seats, ClaimWindow: r.cfg.ClaimWindow,
	})
	err = errors.Join(err, seatsErr)
	r.admitted.Add(float64(len(users)))
	if len(users) > 0 {
		r.mu.Lock()
		r.demand = true
		r.mu.Unlock()
	}
	return users, err
}

// InventoryFrom is an InventoryFunc that counts an event's seats with
// c.Inventory at most once per ttl in this process (0: at every call),
// however many joins and admitter passes ask; concurrent callers share
// one read.
func InventoryFrom(c *catalog.Catalog, ttl time.Duration) func(ctx context.Context, eventID uuid.UUID) (catalog.Inventory, error) {
	type read struct {
		inv catalog.Inventory
		at  time.Time
	}
	var (
		mu    sync.Mutex
		reads = map[uuid.UUID]read{}
		group singleflight.Group
	)
	return func(ctx context.Context, eventID uuid.UUID) (catalog.Inventory, error) {
		mu.Lock()
		got, ok := reads[eventID]
		mu.Unlock()
		if ok && time.Since(got.at) < ttl {
			return got.inv, nil
		}
		v, err, _ := group.Do(eventID.String(), func() (any, error) {
			// Shared by every caller waiting on it: it must not end when
			// the request that started it goes away.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			at := time.Now()
			inv, err := c.Inventory(ctx, eventID)
			if err != nil {
				return catalog.Inventory{}, err
			}
			mu.Lock()
			if len(reads) >= 10_000 {
				clear(reads)
			}
			reads[eventID] = read{inv: inv, at: at}
			mu.Unlock()
			return inv, nil
		})
		if err != nil {
			return catalog.Inventory{}, err
		}
		return v.(catalog.Inventory), nil
	}
}
