// Package catalog creates events with their seats and reads the seat map.
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

	"boxoffice/db"
	"boxoffice/sqlcgen"
)

// MaxSeats is the most seats one event can be created with in one request.
const MaxSeats = 100_000

// ErrNotFound is returned for an event that does not exist.
var ErrNotFound = errors.New("event not found")

// ValidationError describes input that is well-formed but not acceptable.
// Its message is safe to show to the client.
type ValidationError struct {
	Location string
	Message  string
}

func (e *ValidationError) Error() string { return e.Location + ": " + e.Message }

// Section generates a rectangular block of seats: rows named A, B, … Z, AA,
// AB, …, seats numbered from 1, labelled "A-1".
type Section struct {
	Name        string
	Rows        int
	SeatsPerRow int
	PriceMinor  int64
}

// Seat is one explicitly listed seat.
type Seat struct {
	Section    string
	Label      string
	PriceMinor int64
}

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
}

// Event is a stored event.
type Event = sqlcgen.Event

// Catalog reads and writes events and seats.
type Catalog struct {
	pool *pgxpool.Pool

	// seatTTL > 0 caches seat maps (WithSeatMapCache).
	seatTTL   time.Duration
	seatLoads singleflight.Group
	seatMu    sync.Mutex
	seatMaps  map[uuid.UUID]seatMap
	// seatReads counts seat maps read from the database, for tests.
	seatReads atomic.Int64
}

type seatMap struct {
	at    time.Time
	seats []SeatStatus
}

// New returns a Catalog on pool.
func New(pool *pgxpool.Pool) *Catalog { return &Catalog{pool: pool} }

// WithSeatMapCache returns a Catalog on the same pool whose Seats serves
// each event's seat map from memory for up to ttl, loading it once for
// all the requests that want it meanwhile. In an onsale every admitted
// buyer reads the seat map, often after each lost seat; without this,
// thousands of identical reads of thousands of rows compete with the
// holds for the database. The map was always a hint (only a hold
// decides), now at most ttl older.
func (c *Catalog) WithSeatMapCache(ttl time.Duration) *Catalog {
	return &Catalog{pool: c.pool, seatTTL: ttl, seatMaps: map[uuid.UUID]seatMap{}}
}

// CreateEvent stores the event and all its seats in one transaction, the
// seats with COPY, and creates the organizer on first use. It returns a
// *ValidationError for seats that are empty, too many (over MaxSeats) or
// duplicated within a section.
func (c *Catalog) CreateEvent(ctx context.Context, p EventParams) (Event, error) {
	eventID := uuid.Must(uuid.NewV7())
	seats, err := expand(eventID, p)
	if err != nil {
		return Event{}, err
	}
	return db.WithTxV(ctx, c.pool, func(ctx context.Context, tx pgx.Tx) (Event, error) {
		q := sqlcgen.New()
		if err := q.OrganizerEnsure(ctx, tx, p.OrganizerID); err != nil {
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
		if _, err := q.SeatCopyFrom(ctx, tx, seats); err != nil {
			return Event{}, fmt.Errorf("copy seats: %w", err)
		}
		return ev, nil
	})
}

func expand(eventID uuid.UUID, p EventParams) ([]sqlcgen.SeatCopyFromParams, error) {
	switch {
	case len(p.Sections) > 0 && len(p.Seats) > 0:
		return nil, &ValidationError{"body", "give either sections or seats, not both"}
	case len(p.Sections) == 0 && len(p.Seats) == 0:
		return nil, &ValidationError{"body", "an event needs sections or seats"}
	}
	total := len(p.Seats)
	for _, s := range p.Sections {
		total += s.Rows * s.SeatsPerRow
		if total > MaxSeats {
			break
		}
	}
	if total > MaxSeats {
		return nil, &ValidationError{"body", fmt.Sprintf("at most %d seats per event", MaxSeats)}
	}

	seats := make([]sqlcgen.SeatCopyFromParams, 0, total)
	add := func(section, label string, price int64) {
		seats = append(seats, sqlcgen.SeatCopyFromParams{
			ID:         uuid.Must(uuid.NewV7()),
			EventID:    eventID,
			Position:   int32(len(seats)),
			Section:    section,
			Label:      label,
			PriceMinor: price,
		})
	}
	sectionNames := make(map[string]bool, len(p.Sections))
	for i, s := range p.Sections {
		if sectionNames[s.Name] {
			return nil, &ValidationError{fmt.Sprintf("body.sections[%d].name", i), "duplicate section name"}
		}
		sectionNames[s.Name] = true
		for r := range s.Rows {
			row := RowName(r)
			for n := 1; n <= s.SeatsPerRow; n++ {
				add(s.Name, fmt.Sprintf("%s-%d", row, n), s.PriceMinor)
			}
		}
	}
	type key struct{ section, label string }
	seen := make(map[key]bool, len(p.Seats))
	for i, s := range p.Seats {
		k := key{s.Section, s.Label}
		if seen[k] {
			return nil, &ValidationError{fmt.Sprintf("body.seats[%d]", i), "duplicate seat label in section"}
		}
		seen[k] = true
		add(s.Section, s.Label, s.PriceMinor)
	}
	return seats, nil
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
	ev, err := sqlcgen.New().EventGetByID(ctx, c.pool, id)
	if err = db.Interpret(err); errors.Is(err, db.ErrNotFound) {
		return Event{}, ErrNotFound
	} else if err != nil {
		return Event{}, fmt.Errorf("get event: %w", err)
	}
	return ev, nil
}

// SeatStatus is one seat of the seat map with its status: available, held or
// sold. The map is a hint and may be stale when read; only a hold decides.
type SeatStatus = sqlcgen.SeatListByEventRow

// Seats returns the seat map of an event in layout order, or ErrNotFound.
//
// With WithSeatMapCache the slice is shared: callers must not modify it.
func (c *Catalog) Seats(ctx context.Context, eventID uuid.UUID) ([]SeatStatus, error) {
	if c.seatTTL <= 0 {
		return c.loadSeats(ctx, eventID)
	}
	c.seatMu.Lock()
	m, ok := c.seatMaps[eventID]
	c.seatMu.Unlock()
	if ok && time.Since(m.at) < c.seatTTL {
		return m.seats, nil
	}
	v, err, _ := c.seatLoads.Do(eventID.String(), func() (any, error) {
		// Shared by every request waiting on it: it must not end when the
		// request that started it goes away.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		at := time.Now()
		seats, err := c.loadSeats(ctx, eventID)
		if err != nil {
			return nil, err
		}
		c.seatMu.Lock()
		if len(c.seatMaps) >= 10_000 {
			clear(c.seatMaps)
		}
		c.seatMaps[eventID] = seatMap{at: at, seats: seats}
		c.seatMu.Unlock()
		return seats, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]SeatStatus), nil
}

func (c *Catalog) loadSeats(ctx context.Context, eventID uuid.UUID) ([]SeatStatus, error) {
	c.seatReads.Add(1)
	if _, err := c.Event(ctx, eventID); err != nil {
		return nil, err
	}
	seats, err := sqlcgen.New().SeatListByEvent(ctx, c.pool, eventID)
	if err != nil {
		return nil, fmt.Errorf("list seats: %w", err)
	}
	return seats, nil
}

// EventsByOrganizer returns the organizer's events, oldest first.
func (c *Catalog) EventsByOrganizer(ctx context.Context, organizerID uuid.UUID) ([]Event, error) {
	evs, err := sqlcgen.New().EventListByOrganizer(ctx, c.pool, organizerID)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return evs, nil
}
