package handlers

import (
	"context"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/domain/catalog"
)

// SectionInput generates a rectangular block of seats.
type SectionInput struct {
	Name        string `json:"name" minLength:"1" maxLength:"100" trim:"true" pattern:"\\S" patternDescription:"text that is not blank" example:"Floor" doc:"Section name."`
	Rows        int    `json:"rows" minimum:"1" maximum:"1000" example:"20" doc:"Rows, named A, B, … Z, AA, …"`
	SeatsPerRow int    `json:"seatsPerRow" minimum:"1" maximum:"1000" example:"30" doc:"Seats per row, numbered from 1; labels look like A-12."`
	PriceMinor  int64  `json:"priceMinor" minimum:"0" maximum:"100000000" example:"8500" doc:"Price of each seat in minor units of the event currency. With category, must be that category's price."`
	Category    string `json:"category,omitempty" maxLength:"100" example:"Floor" doc:"The price category of the section's seats, one of categories; required when the event has categories."`
}

// SeatInput is one explicitly listed seat.
type SeatInput struct {
	Section    string `json:"section" minLength:"1" maxLength:"100" trim:"true" pattern:"\\S" patternDescription:"text that is not blank" example:"Balcony"`
	Label      string `json:"label" minLength:"1" maxLength:"50" trim:"true" pattern:"\\S" patternDescription:"text that is not blank" example:"B-7"`
	PriceMinor int64  `json:"priceMinor" minimum:"0" maximum:"100000000" example:"4500" doc:"With category, must be that category's price."`
	Category   string `json:"category,omitempty" maxLength:"100" example:"Balcony front" doc:"The seat's price category, one of categories; required when the event has categories."`
}

// CategoryInput is one price category of a new event.
type CategoryInput struct {
	Name       string `json:"name" minLength:"1" maxLength:"100" trim:"true" pattern:"\\S" patternDescription:"text that is not blank" example:"Floor"`
	PriceMinor int64  `json:"priceMinor" minimum:"0" maximum:"100000000" example:"8500" doc:"Price of each seat of the category in minor units of the event currency."`
	SeatLimit  int    `json:"seatLimit,omitempty" minimum:"0" maximum:"100000" example:"4" doc:"Seats of the category one buyer may hold or own at once; 0 or absent for no limit of the category's own (the onsale's per-buyer limit still applies)."`
}

// CreateEventInput creates an event with its seats.
type CreateEventInput struct {
	IdempotencyKeyHeader
	Body struct {
		Name     string         `json:"name" minLength:"1" maxLength:"200" trim:"true" pattern:"\\S" patternDescription:"text that is not blank" example:"The Midnight Tour — Berlin"`
		StartsAt time.Time      `json:"startsAt" example:"2027-06-01T19:30:00Z"`
		Currency string         `json:"currency" pattern:"^[a-z]{3}$" example:"eur" doc:"ISO 4217 code, lower case."`
		Sections []SectionInput `json:"sections,omitempty" maxItems:"1000" doc:"Seat generator. Give either sections or seats."`
		Seats    []SeatInput    `json:"seats,omitempty" maxItems:"100000" doc:"Explicit seats. Give either sections or seats."`
		// Categories is additive (issue 30): without it, each section is a category.
		Categories []CategoryInput `json:"categories,omitempty" maxItems:"1000" doc:"Price categories, in the order the seat map lists them; every section or seat then names one. Without them each section becomes a category of its name and price (a section of explicit seats at several prices, one per price)."`
	}
}

// EventBody is an event.
type EventBody struct {
	ID          uuid.UUID `json:"id"`
	OrganizerID uuid.UUID `json:"organizerId"`
	Name        string    `json:"name"`
	StartsAt    time.Time `json:"startsAt"`
	Currency    string    `json:"currency"`
	SeatCount   int32     `json:"seatCount"`
	CreatedAt   time.Time `json:"createdAt"`
}

// EventOutput is an event response.
type EventOutput struct {
	Location string `header:"Location"`
	Body     EventBody
}

// EventPathInput names an event.
type EventPathInput struct {
	EventID string `path:"eventId" format:"uuid" doc:"Event id (UUID)."`
}

// SeatBody is one seat of the seat map.
type SeatBody struct {
	ID         uuid.UUID `json:"id"`
	Label      string    `json:"label"`
	Section    string    `json:"section"`
	PriceMinor int64     `json:"priceMinor" doc:"The seat's category's price."`
	CategoryID uuid.UUID `json:"categoryId" doc:"The seat's price category, one of categories."`
	Category   string    `json:"category" doc:"The name of the seat's price category."`
	Status     string    `json:"status" enum:"available,held,sold" doc:"available: on sale; held: a buyer's hold owns it (it may come back); sold: sold, or held back by the organizer."`
}

// CategoryBody is one price category of an event.
type CategoryBody struct {
	ID         uuid.UUID `json:"id"`
	Name       string    `json:"name"`
	PriceMinor int64     `json:"priceMinor"`
	SeatLimit  int       `json:"seatLimit" doc:"Seats of the category one buyer may hold or own at once; 0: no limit of its own."`
}

// SeatsOutputBody is the seat map.
type SeatsOutputBody struct {
	Seats      []SeatBody     `json:"seats"`
	Categories []CategoryBody `json:"categories" doc:"The event's price categories, in the organizer's order."`
}

// EventReadInput names an event for a public read, which is conditional
// (If-None-Match), compressed when the client accepts gzip, and rate
// limited per client address.
type EventReadInput struct {
	EventPathInput
	IfNoneMatch string `header:"If-None-Match" maxLength:"1024" doc:"The ETag of the copy you have: 304 with no body while it is current."`
	conditions  readConditions
	addr        string
}

// Resolve records the encodings the client accepts and its address.
func (in *EventReadInput) Resolve(ctx huma.Context) []error {
	in.conditions = readConditions{ifNoneMatch: in.IfNoneMatch, gzip: acceptsGzip(ctx.Header("Accept-Encoding"))}
	in.addr = clientAddress(ctx.RemoteAddr())
	return nil
}

// Cache-Control of the public reads: the seat map is as fresh as the
// catalog's one-second cache of it; an event does not change once
// created.
const (
	seatMapCacheControl = "public, max-age=1"
	eventCacheControl   = "public, max-age=60"
)

func eventBody(ev catalog.Event) EventBody {
	return EventBody{
		ID: ev.ID, OrganizerID: ev.OrganizerID, Name: ev.Name, StartsAt: ev.StartsAt.UTC(),
		Currency: ev.Currency, SeatCount: ev.SeatCount, CreatedAt: ev.CreatedAt.UTC(),
	}
}

// allowRead takes one of the client address's reads, or returns the 429
// problem.
func (h *Handlers) allowRead(addr string) error {
	if wait, ok := h.limits.reads.allow(addr, time.Now()); !ok {
		return rateLimited("Too many event reads from your address; slow down.", wait)
	}
	return nil
}

func (h *Handlers) createEvent(ctx context.Context, in *CreateEventInput) (*EventOutput, error) {
	id := identity(ctx)
	// An event lives in its organizer's cell, with the organizer's webhook
	// endpoints, for its whole life.
	c, err := h.organizerCell(ctx)
	if err != nil {
		return nil, err
	}
	p := catalog.EventParams{
		OrganizerID: id.OrganizerID,
		Name:        in.Body.Name,
		StartsAt:    in.Body.StartsAt,
		Currency:    in.Body.Currency,
		Cell:        c.Name,
	}
	for _, s := range in.Body.Sections {
		p.Sections = append(p.Sections, catalog.Section(s))
	}
	for _, s := range in.Body.Seats {
		p.Seats = append(p.Seats, catalog.Seat(s))
	}
	for _, c := range in.Body.Categories {
		p.Categories = append(p.Categories, catalog.Category(c))
	}
	body, replayed, err := idempotently(ctx, c, idempotentRequest{op: "create-event", key: in.IdempotencyKey, parts: []any{in.Body}},
		func(ctx context.Context, tx pgx.Tx) (EventBody, error) {
			ev, err := c.Catalog.CreateEventTx(ctx, tx, p)
			return eventBody(ev), err
		},
		func(ctx context.Context) (EventBody, error) {
			ev, err := c.Catalog.CreateEvent(ctx, p)
			return eventBody(ev), err
		})
	if err != nil {
		return nil, h.problemFor(ctx, err, "create event", "")
	}
	h.cells.Remember(body.ID, c)
	if replayed {
		h.logger.InfoContext(ctx, "event creation replayed", "correlation_id", CorrelationID(ctx), "event_id", body.ID)
	}
	return &EventOutput{Location: "/v1/events/" + body.ID.String(), Body: body}, nil
}

func (h *Handlers) getEvent(ctx context.Context, in *EventReadInput) (*ReadOutput, error) {
	return readEvent(ctx, h, in, "get event", "encode event", eventCacheControl, (*catalog.Catalog).Event,
		func(_ uuid.UUID, ev catalog.Event) (*representation, error) {
			return newRepresentation(eventBody(ev)) // a few hundred bytes: not worth keeping
		})
}

func (h *Handlers) listSeats(ctx context.Context, in *EventReadInput) (*ReadOutput, error) {
	return readEvent(ctx, h, in, "list seats", "encode seat map", seatMapCacheControl, (*catalog.Catalog).SeatMap,
		func(eventID uuid.UUID, m catalog.SeatMap) (*representation, error) {
			return h.seatMaps.get(eventID, m, encodeSeatMap)
		})
}

// readEvent answers a public, cacheable read of one event's catalogue:
// it takes one of the client address's reads (allowRead, else the 429),
// finds the event's cell (the 422, 404 or 503 problem), reads what the
// catalogue has (a missing event is a 404; op names the read in the
// log), encodes it (a failure is a 500; encodeOp names it) and answers
// the representation under the request's conditions with cacheControl.
func readEvent[T any](ctx context.Context, h *Handlers, in *EventReadInput, op, encodeOp, cacheControl string,
	read func(*catalog.Catalog, context.Context, uuid.UUID) (T, error),
	encode func(uuid.UUID, T) (*representation, error),
) (*ReadOutput, error) {
	if err := h.allowRead(in.addr); err != nil {
		return nil, err
	}
	c, eventID, err := h.eventPath(ctx, in.EventID)
	if err != nil {
		return nil, err
	}
	v, err := read(c.Catalog, ctx, eventID)
	if err != nil {
		return nil, h.problemFor(ctx, err, op, "No such event.")
	}
	rep, err := encode(eventID, v)
	if err != nil {
		return nil, h.internal(ctx, encodeOp, err, "event_id", eventID)
	}
	return rep.answer(in.conditions, cacheControl), nil
}
