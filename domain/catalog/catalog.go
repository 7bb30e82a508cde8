// Package catalog creates events with their seats and reads the seat map.
//
// It owns, as their one writer, the tables events, price_categories and
// seats; an event's
// organizer row it ensures through platform/organizer, the organizers
// table's one writer (platform/apikey asks it too, before keying an
// organizer). Other packages read them, and ask catalog to change them; cmd/boxoffice/layers_test.go (tableOwners) holds it. An
// event is created with every seat in one transaction. A seat's
// availability is not stored here but decided by the holds and tickets
// that own it (package purchase, docs/design/holds.md); the seat map it
// reads is a hint, and only a hold decides.
package catalog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/singleflight"

	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/platform/organizer"
	"boxoffice/platform/page"
	"boxoffice/platform/sliceutil"
	"boxoffice/sqlcgen"
)

// MaxSeats is the most seats one event can be created with in one request.
const MaxSeats = 100_000

// ErrNotFound is returned for an event that does not exist.
var ErrNotFound = fault.New(fault.CodeNotFound, "event not found")

// ValidationError describes input that is well-formed but not acceptable
// (fault.ValidationError). Its message is safe to show to the client.
type ValidationError = fault.ValidationError

// Section generates a rectangular block of seats: rows named A, B, … Z, AA,
// AB, …, seats numbered from 1, labelled "A-1".
type Section struct {
	Name        string
	Rows        int
	SeatsPerRow int
	PriceMinor  int64
	// Category names the price category of the section's seats: required
	// when EventParams.Categories is set (PriceMinor must then be that
	// category's price), empty otherwise.
	Category string
}

// Seat is one explicitly listed seat.
type Seat struct {
	Section    string
	Label      string
	PriceMinor int64
	// Category is as Section.Category.
	Category string
}

// Category is a price category of an event: a seat's price is its
// category's. Categories are created with their event and never repriced.
type Category struct {
	Name       string
	PriceMinor int64
	// SeatLimit is how many seats of the category one buyer may hold or
	// own at once, checked in the hold's transaction; 0 for no limit of
	// the category's own.
	SeatLimit int
}

// MaxCategories is the most price categories one event can have.
const MaxCategories = 1000

// EventParams is an organizer's request to create an event. Exactly one of
// Sections and Seats is set.
type EventParams struct {
	OrganizerID uuid.UUID
	Name        string
	StartsAt    time.Time
	Currency    string
	Cell        string
	Sections    []Section
	Seats       []Seat
	// Categories, when set, are the event's price categories, in the
	// order the seat map lists them, and every section or seat names one.
	// Unset, each section becomes a category of its name and price (a
	// section of explicit seats at several prices, one per price, named
	// "<section> · <price>"), as the migration that introduced categories
	// did for the events before them.
	Categories []Category
}

// Event is a stored event.
type Event struct {
	ID          uuid.UUID
	OrganizerID uuid.UUID
	Name        string
	StartsAt    time.Time
	Currency    string
	// PurchaseCell names the cell that sells the event's seats.
	PurchaseCell string
	SeatCount    int32
	CreatedAt    time.Time
}

// Catalog reads and writes events and seats.
type Catalog struct {
	pool *pgxpool.Pool

	// seatTTL > 0 caches seat maps (WithSeatMapCache).
	seatTTL   time.Duration
	seatLoads singleflight.Group
	seatMu    sync.Mutex
	seatMaps  map[uuid.UUID]SeatMap
	// seatReads counts seat maps read from the database, for tests.
	seatReads atomic.Int64
	// versions numbers the seat maps read from the database.
	versions atomic.Uint64

	// eventTTL > 0 caches events, notFoundTTL > 0 the ids of events that
	// do not exist (WithEventCache).
	eventTTL, notFoundTTL time.Duration
	eventLoads            singleflight.Group
	eventMu               sync.Mutex
	events                map[uuid.UUID]cachedEvent
	// eventReads counts events read from the database, for tests.
	eventReads atomic.Int64
}

// SeatMap is an event's seat map as read at one moment.
type SeatMap struct {
	// Seats are in layout order. Shared when cached: callers must not
	// modify it.
	Seats []SeatStatus
	// Categories are the event's price categories in the organizer's
	// order. Shared as Seats.
	Categories []PriceCategory
	// Version is new for every read of the map from the database: a
	// caller may keep what it derived from Seats for as long as Version
	// stays the same.
	Version uint64
	at      time.Time
}

type cachedEvent struct {
	at    time.Time
	event Event
	found bool
}

// maxCached bounds each cache's entries; it holds the events read within
// one TTL.
const maxCached = 10_000

// New returns a Catalog on pool.
func New(pool *pgxpool.Pool) *Catalog { return &Catalog{pool: pool} }

// read is the pool for sqlcgen's reads, its errors interpreted
// (db.Interpreting): a missing row is db.ErrNotFound.
func (c *Catalog) read() db.DBTX { return db.Interpreting(c.pool) }

// clone is a Catalog with c's settings and empty caches.
func (c *Catalog) clone() *Catalog {
	return &Catalog{
		pool: c.pool, seatTTL: c.seatTTL, eventTTL: c.eventTTL, notFoundTTL: c.notFoundTTL,
		seatMaps: map[uuid.UUID]SeatMap{}, events: map[uuid.UUID]cachedEvent{},
	}
}

// WithSeatMapCache returns a Catalog on the same pool whose Seats serves
// each event's seat map from memory for up to ttl, loading it once for
// all the requests that want it meanwhile. In an onsale every admitted
// buyer reads the seat map, often after each lost seat; without this,
// thousands of identical reads of thousands of rows compete with the
// holds for the database. The map was always a hint (only a hold
// decides), now at most ttl older.
func (c *Catalog) WithSeatMapCache(ttl time.Duration) *Catalog {
	n := c.clone()
	n.seatTTL = ttl
	return n
}

// WithEventCache returns a Catalog on the same pool whose Event serves an
// event from memory for up to ttl (events do not change once created),
// and the answer that an event does not exist for up to notFoundTTL, so
// that requests for ids that name nothing do not each reach the database.
// Each read is made once for all the requests that want it meanwhile;
// each cache holds at most 10,000 entries.
func (c *Catalog) WithEventCache(ttl, notFoundTTL time.Duration) *Catalog {
	n := c.clone()
	n.eventTTL, n.notFoundTTL = ttl, notFoundTTL
	return n
}

// CreateEvent stores the event, its price categories and all its seats in
// one transaction, the seats with COPY, and creates the organizer on first
// use. It returns a *ValidationError for seats that are empty, too many
// (over MaxSeats) or duplicated within a section, and for categories that
// are duplicated, unnamed by a seat, or priced otherwise than a seat that
// names them says.
func (c *Catalog) CreateEvent(ctx context.Context, p EventParams) (Event, error) {
	return c.createEvent(ctx, c.pool, p)
}

// CreateEventTx is CreateEvent in the caller's transaction tx (as a
// savepoint of it): the event exists once tx commits.
func (c *Catalog) CreateEventTx(ctx context.Context, tx pgx.Tx, p EventParams) (Event, error) {
	return c.createEvent(ctx, tx, p)
}

func (c *Catalog) createEvent(ctx context.Context, on db.Executor, p EventParams) (Event, error) {
	eventID := uuid.Must(uuid.NewV7())
	seats, categories, err := expand(eventID, p)
	if err != nil {
		return Event{}, err
	}
	ev, err := db.WithTxV(ctx, on, func(ctx context.Context, tx pgx.Tx) (Event, error) {
		q := sqlcgen.New()
		if err := organizer.Ensure(ctx, tx, p.OrganizerID); err != nil {
			return Event{}, fmt.Errorf("ensure organizer: %w", err)
		}
		ev, err := q.EventInsert(ctx, tx, sqlcgen.EventInsertParams{
			ID:           eventID,
			OrganizerID:  p.OrganizerID,
			Name:         p.Name,
			StartsAt:     p.StartsAt,
			Currency:     p.Currency,
			PurchaseCell: p.Cell,
			SeatCount:    int32(len(seats)),
		})
		if err != nil {
			return Event{}, fmt.Errorf("insert event: %w", err)
		}
		if _, err := q.PriceCategoryCopyFrom(ctx, tx, categories); err != nil {
			return Event{}, fmt.Errorf("copy price categories: %w", err)
		}
		if _, err := q.SeatCopyFrom(ctx, tx, seats); err != nil {
			return Event{}, fmt.Errorf("copy seats: %w", err)
		}
		return Event(ev), nil
	})
	if err == nil && c.events != nil {
		c.eventMu.Lock()
		delete(c.events, eventID) // in case anyone asked for the id before it existed
		c.eventMu.Unlock()
	}
	return ev, err
}

func expand(eventID uuid.UUID, p EventParams) ([]sqlcgen.SeatCopyFromParams, []sqlcgen.PriceCategoryCopyFromParams, error) {
	switch {
	case len(p.Sections) > 0 && len(p.Seats) > 0:
		return nil, nil, &ValidationError{Location: "body", Message: "give either sections or seats, not both"}
	case len(p.Sections) == 0 && len(p.Seats) == 0:
		return nil, nil, &ValidationError{Location: "body", Message: "an event needs sections or seats"}
	case len(p.Categories) > MaxCategories:
		return nil, nil, &ValidationError{Location: "body.categories", Message: fmt.Sprintf("at most %d categories per event", MaxCategories)}
	}
	total := len(p.Seats)
	for _, s := range p.Sections {
		total += s.Rows * s.SeatsPerRow
		if total > MaxSeats {
			break
		}
	}
	if total > MaxSeats {
		return nil, nil, &ValidationError{Location: "body", Message: fmt.Sprintf("at most %d seats per event", MaxSeats)}
	}
	cats, err := newCategories(eventID, p)
	if err != nil {
		return nil, nil, err
	}

	seats := make([]sqlcgen.SeatCopyFromParams, 0, total)
	add := func(section, label string, cat sqlcgen.PriceCategoryCopyFromParams) {
		seats = append(seats, sqlcgen.SeatCopyFromParams{
			ID:         uuid.Must(uuid.NewV7()),
			EventID:    eventID,
			Position:   int32(len(seats)),
			Section:    section,
			Label:      label,
			PriceMinor: cat.PriceMinor,
			CategoryID: cat.ID,
		})
	}
	sectionNames := make(map[string]bool, len(p.Sections))
	for i, s := range p.Sections {
		if sectionNames[s.Name] {
			return nil, nil, &ValidationError{Location: fmt.Sprintf("body.sections[%d].name", i), Message: "duplicate section name"}
		}
		sectionNames[s.Name] = true
		cat, err := cats.of(fmt.Sprintf("body.sections[%d]", i), s.Name, s.Category, s.PriceMinor)
		if err != nil {
			return nil, nil, err
		}
		for r := range s.Rows {
			row := RowName(r)
			for n := 1; n <= s.SeatsPerRow; n++ {
				add(s.Name, fmt.Sprintf("%s-%d", row, n), cat)
			}
		}
	}
	type key struct{ section, label string }
	seen := make(map[key]bool, len(p.Seats))
	for i, s := range p.Seats {
		k := key{s.Section, s.Label}
		if seen[k] {
			return nil, nil, &ValidationError{Location: fmt.Sprintf("body.seats[%d]", i), Message: "duplicate seat label in section"}
		}
		seen[k] = true
		cat, err := cats.of(fmt.Sprintf("body.seats[%d]", i), s.Section, s.Category, s.PriceMinor)
		if err != nil {
			return nil, nil, err
		}
		add(s.Section, s.Label, cat)
	}
	for i, c := range cats.list {
		if !cats.used[c.Name] {
			return nil, nil, &ValidationError{Location: fmt.Sprintf("body.categories[%d]", i), Message: "no section or seat is in this category"}
		}
	}
	return seats, cats.list, nil
}

// categorySet is an event's price categories while its seats are laid
// out: the organizer's, or those derived from sections and prices.
type categorySet struct {
	eventID uuid.UUID
	given   bool
	list    []sqlcgen.PriceCategoryCopyFromParams
	byName  map[string]int
	used    map[string]bool
	// derived names a derived category by its section and price.
	derived map[derivedKey]int
	// prices counts the distinct prices of each section, for naming.
	prices map[string]int
}

type derivedKey struct {
	section string
	price   int64
}

func newCategories(eventID uuid.UUID, p EventParams) (*categorySet, error) {
	cs := &categorySet{
		eventID: eventID, given: len(p.Categories) > 0,
		byName: map[string]int{}, used: map[string]bool{},
		derived: map[derivedKey]int{}, prices: map[string]int{},
	}
	for i, c := range p.Categories {
		if _, dup := cs.byName[c.Name]; dup {
			return nil, &ValidationError{Location: fmt.Sprintf("body.categories[%d].name", i), Message: "duplicate category name"}
		}
		cs.byName[c.Name] = len(cs.list)
		cs.list = append(cs.list, sqlcgen.PriceCategoryCopyFromParams{
			ID: uuid.Must(uuid.NewV7()), EventID: eventID, Position: int32(i),
			Name: c.Name, PriceMinor: c.PriceMinor, SeatLimit: int32(max(c.SeatLimit, 0)),
		})
	}
	if !cs.given {
		seen := map[derivedKey]bool{}
		for _, s := range p.Seats {
			if k := (derivedKey{s.Section, s.PriceMinor}); !seen[k] {
				seen[k] = true
				cs.prices[s.Section]++
			}
		}
	}
	return cs, nil
}

// of returns the category of a section's or seat's seats at location:
// the one it names, which must exist and have its price, when the event
// has categories; else the derived one of its section and price.
func (cs *categorySet) of(location, section, name string, price int64) (sqlcgen.PriceCategoryCopyFromParams, error) {
	if cs.given {
		i, ok := cs.byName[name]
		switch {
		case name == "":
			return sqlcgen.PriceCategoryCopyFromParams{}, &ValidationError{Location: location + ".category", Message: "name one of the event's categories"}
		case !ok:
			return sqlcgen.PriceCategoryCopyFromParams{}, &ValidationError{Location: location + ".category", Message: "no such category in body.categories"}
		case cs.list[i].PriceMinor != price:
			return sqlcgen.PriceCategoryCopyFromParams{}, &ValidationError{Location: location + ".priceMinor", Message: fmt.Sprintf("must be the category's price, %d", cs.list[i].PriceMinor)}

		}
		cs.used[name] = true
		return cs.list[i], nil
	}
	if name != "" {
		return sqlcgen.PriceCategoryCopyFromParams{}, &ValidationError{Location: location + ".category", Message: "name categories in body.categories first"}
	}
	k := derivedKey{section, price}
	if i, ok := cs.derived[k]; ok {
		return cs.list[i], nil
	}
	catName := section
	if cs.prices[section] > 1 {
		catName = fmt.Sprintf("%s · %d", section, price)
	}
	cs.derived[k] = len(cs.list)
	cs.used[catName] = true
	cs.list = append(cs.list, sqlcgen.PriceCategoryCopyFromParams{
		ID: uuid.Must(uuid.NewV7()), EventID: cs.eventID, Position: int32(len(cs.list)),
		Name: catName, PriceMinor: price,
	})
	return cs.list[len(cs.list)-1], nil
}

// RowName names the zero-based row r as spreadsheets name columns: A … Z,
// AA … AZ, BA, …
func RowName(r int) string {
	name := ""
	for r++; r > 0; r = (r - 1) / 26 {
		name = string(rune('A'+(r-1)%26)) + name
	}
	return name
}

// Event returns the event with id, or ErrNotFound.
func (c *Catalog) Event(ctx context.Context, id uuid.UUID) (Event, error) {
	if c.eventTTL <= 0 && c.notFoundTTL <= 0 {
		return c.loadEvent(ctx, id)
	}
	now := time.Now()
	c.eventMu.Lock()
	e, ok := c.events[id]
	c.eventMu.Unlock()
	switch {
	case ok && e.found && now.Sub(e.at) < c.eventTTL:
		return e.event, nil
	case ok && !e.found && now.Sub(e.at) < c.notFoundTTL:
		return Event{}, ErrNotFound
	}
	v, err, _ := c.eventLoads.Do(id.String(), func() (any, error) {
		// Shared by every request waiting on it: it must not end when the
		// request that started it goes away.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		at := time.Now()
		ev, err := c.loadEvent(ctx, id)
		found := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err // not an answer: nothing to cache
		}
		if (found && c.eventTTL > 0) || (!found && c.notFoundTTL > 0) {
			c.eventMu.Lock()
			c.evictEvents(at)
			c.events[id] = cachedEvent{at: at, event: ev, found: found}
			c.eventMu.Unlock()
		}
		return ev, err
	})
	if err != nil {
		return Event{}, err
	}
	return v.(Event), nil
}

// evictEvents makes room for entries when the cache is full, dropping the
// expired ones and then any until a tenth is free, so that a flood of
// unknown ids costs one sweep per thousand of them; with c.eventMu held.
func (c *Catalog) evictEvents(now time.Time) {
	if len(c.events) < maxCached {
		return
	}
	for id, e := range c.events {
		if (e.found && now.Sub(e.at) >= c.eventTTL) || (!e.found && now.Sub(e.at) >= c.notFoundTTL) {
			delete(c.events, id)
		}
	}
	for id := range c.events {
		if len(c.events) < maxCached*9/10 {
			break
		}
		delete(c.events, id)
	}
}

func (c *Catalog) loadEvent(ctx context.Context, id uuid.UUID) (Event, error) {
	c.eventReads.Add(1)
	ev, err := sqlcgen.New().EventGetByID(ctx, c.read(), id)
	if errors.Is(err, db.ErrNotFound) {
		return Event{}, ErrNotFound
	} else if err != nil {
		return Event{}, fmt.Errorf("get event: %w", err)
	}
	return Event(ev), nil
}

// SeatStatus is one seat of the seat map with its status: available, held or
// sold. The map is a hint and may be stale when read; only a hold decides.
type SeatStatus struct {
	ID      uuid.UUID
	Section string
	Label   string
	// PriceMinor is the seat's category's price.
	PriceMinor int64
	CategoryID uuid.UUID
	// Category is the name of the seat's price category.
	Category string
	Status   string
}

// PriceCategory is one of an event's price categories as stored.
type PriceCategory struct {
	ID         uuid.UUID
	Name       string
	PriceMinor int64
	// SeatLimit is the category's seats per buyer; 0 for none of its own.
	SeatLimit int
}

// Seats returns the seat map of an event in layout order, or ErrNotFound.
//
// With WithSeatMapCache the slice is shared: callers must not modify it.
func (c *Catalog) Seats(ctx context.Context, eventID uuid.UUID) ([]SeatStatus, error) {
	m, err := c.SeatMap(ctx, eventID)
	return m.Seats, err
}

// SeatMap returns the seat map of an event with its version, or
// ErrNotFound; with WithSeatMapCache, from memory while at most its ttl
// old.
func (c *Catalog) SeatMap(ctx context.Context, eventID uuid.UUID) (SeatMap, error) {
	if c.seatTTL <= 0 {
		return c.loadSeats(ctx, eventID)
	}
	c.seatMu.Lock()
	m, ok := c.seatMaps[eventID]
	c.seatMu.Unlock()
	if ok && time.Since(m.at) < c.seatTTL {
		return m, nil
	}
	v, err, _ := c.seatLoads.Do(eventID.String(), func() (any, error) {
		// Shared by every request waiting on it: it must not end when the
		// request that started it goes away.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		m, err := c.loadSeats(ctx, eventID)
		if err != nil {
			return nil, err
		}
		c.seatMu.Lock()
		if len(c.seatMaps) >= maxCached {
			clear(c.seatMaps)
		}
		c.seatMaps[eventID] = m
		c.seatMu.Unlock()
		return m, nil
	})
	if err != nil {
		return SeatMap{}, err
	}
	return v.(SeatMap), nil
}

func (c *Catalog) loadSeats(ctx context.Context, eventID uuid.UUID) (SeatMap, error) {
	c.seatReads.Add(1)
	at := time.Now()
	if _, err := c.Event(ctx, eventID); err != nil {
		return SeatMap{}, err
	}
	rows, err := sqlcgen.New().SeatListByEvent(ctx, c.read(), eventID)
	if err != nil {
		return SeatMap{}, fmt.Errorf("list seats: %w", err)
	}
	seats := sliceutil.Map(rows, func(r sqlcgen.SeatListByEventRow) SeatStatus { return SeatStatus(r) })
	cats, err := c.Categories(ctx, eventID)
	if err != nil {
		return SeatMap{}, err
	}
	return SeatMap{Seats: seats, Categories: cats, Version: c.versions.Add(1), at: at}, nil
}

// Categories returns the event's price categories in the organizer's
// order; none for an event that does not exist.
func (c *Catalog) Categories(ctx context.Context, eventID uuid.UUID) ([]PriceCategory, error) {
	rows, err := sqlcgen.New().PriceCategoryListByEvent(ctx, c.read(), eventID)
	if err != nil {
		return nil, fmt.Errorf("list price categories: %w", err)
	}
	return sliceutil.Map(rows, func(r sqlcgen.PriceCategoryListByEventRow) PriceCategory {
		return PriceCategory{ID: r.ID, Name: r.Name, PriceMinor: r.PriceMinor, SeatLimit: int(r.SeatLimit)}
	}), nil
}

// Cursor is the position of e in a list of events.
func (e Event) Cursor() page.Cursor { return page.Cursor{CreatedAt: e.CreatedAt, ID: e.ID} }

// EventsByOrganizer returns up to limit (1 to 100) of the organizer's
// events, oldest first, after the cursor when it is not nil (Event.Cursor
// of the last event of the page before).
func (c *Catalog) EventsByOrganizer(ctx context.Context, organizerID uuid.UUID, after *page.Cursor, limit int) ([]Event, error) {
	p := sqlcgen.EventListByOrganizerParams{OrganizerID: organizerID, MaxRows: int32(min(max(limit, 1), 100))}
	if after != nil {
		p.AfterCreatedAt, p.AfterID = &after.CreatedAt, &after.ID
	}
	rows, err := sqlcgen.New().EventListByOrganizer(ctx, c.read(), p)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return sliceutil.Map(rows, func(r sqlcgen.Event) Event { return Event(r) }), nil
}
