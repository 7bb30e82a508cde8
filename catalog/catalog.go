// Package catalog creates events with their seats and reads the seat map.
package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
}

// New returns a Catalog on pool.
func New(pool *pgxpool.Pool) *Catalog { return &Catalog{pool: pool} }

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
func (c *Catalog) Seats(ctx context.Context, eventID uuid.UUID) ([]SeatStatus, error) {
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
