package handlers

import (
	"context"
	"time"

	"github.com/google/uuid"

	"boxoffice/domain/cells"
	"boxoffice/domain/purchase"
)

// The organizer's views of their events: the list, the sales summary and
// the orders. Another organizer's event does not exist for them (404).

// ListEventsInput pages the caller's events.
type ListEventsInput struct {
	PageInput
}

// ListEventsOutput is a page of the caller's events.
type ListEventsOutput struct {
	Body struct {
		Events []EventBody `json:"events" doc:"Oldest first."`
		PageOutput
	}
}

// SeatCountsBody counts an event's seats by what each is now.
type SeatCountsBody struct {
	Total     int `json:"total"`
	Available int `json:"available" doc:"On sale: no hold, no ticket."`
	Held      int `json:"held" doc:"Owned by a hold that is confirmed, or active and not past its expiry."`
	Sold      int `json:"sold" doc:"With a live ticket."`
	Refunded  int `json:"refunded" doc:"Their ticket was revoked by a refund; off sale."`
	Blocked   int `json:"blocked" doc:"Held back by the organizer (seat-blocks); off sale."`
}

// CategorySalesBody counts one price category's seats by what each is now.
type CategorySalesBody struct {
	CategoryID uuid.UUID      `json:"categoryId"`
	Name       string         `json:"name"`
	PriceMinor int64          `json:"priceMinor"`
	Seats      SeatCountsBody `json:"seats"`
}

// SalesBody is an event's sales at one moment.
type SalesBody struct {
	EventID         uuid.UUID           `json:"eventId"`
	Seats           SeatCountsBody      `json:"seats"`
	ByCategory      []CategorySalesBody `json:"byCategory" doc:"The seats of each price category, counted as seats, in the organizer's order of the categories."`
	CheckedIn       int                 `json:"checkedIn" doc:"Tickets used at the door."`
	OrdersByChannel map[string]int      `json:"ordersByChannel" doc:"How many orders each channel made: online (buyers), comp and box_office (issued by the organizer); every channel is listed."`
	BoxOfficeMinor  int64               `json:"boxOfficeMinor" doc:"The part of grossMinor paid at the box office, outside the payment provider; minor units."`
	OrdersByStatus  map[string]int      `json:"ordersByStatus" doc:"How many orders are in each status; every status is listed."`
	GrossMinor      int64               `json:"grossMinor" doc:"What buyers paid: orders paid, ticketed, refunding or refunded (box office sales included, comps at 0); minor units."`
	RefundedMinor   int64               `json:"refundedMinor" doc:"What was refunded; minor units."`
	NetMinor        int64               `json:"netMinor" doc:"grossMinor - refundedMinor."`
	Currency        string              `json:"currency"`
}

// SalesOutput is the sales response.
type SalesOutput struct {
	Body SalesBody
}

// ListEventOrdersInput selects an event's orders.
type ListEventOrdersInput struct {
	EventPathInput
	Status  string `query:"status" maxLength:"200" example:"ticketed,refunded" doc:"Only orders in these statuses: one status, or several separated by commas."`
	BuyerID string `query:"buyerId" format:"uuid" doc:"Only the orders of this buyer (their user id)."`
	PageInput
}

// EventOrderBody is an order as the organizer of its event sees it.
type EventOrderBody struct {
	ID          uuid.UUID `json:"id"`
	BuyerID     uuid.UUID `json:"buyerId"`
	Status      string    `json:"status" enum:"pending_payment,authorized,capture_pending,paid,ticketed,failed,canceled,refunding,refunded"`
	AmountMinor int64     `json:"amountMinor"`
	Currency    string    `json:"currency"`
	SeatCount   int       `json:"seatCount"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
	Channel     string    `json:"channel" enum:"online,comp,box_office" doc:"online: a buyer's order; comp or box_office: issued by the organizer."`
	Reference   string    `json:"reference,omitempty" doc:"What paid a box office sale, or the organizer's reference of a comp."`
}

// ListEventOrdersOutput is a page of an event's orders.
type ListEventOrdersOutput struct {
	Body struct {
		Orders []EventOrderBody `json:"orders" doc:"Newest first."`
		PageOutput
	}
}

func (h *Handlers) listEvents(ctx context.Context, in *ListEventsInput) (*ListEventsOutput, error) {
	after, limit, err := in.read()
	if err != nil {
		return nil, err
	}
	c, err := h.organizerCell(ctx)
	if err != nil {
		return nil, err
	}
	evs, err := c.Catalog.EventsByOrganizer(ctx, identity(ctx).OrganizerID, after, limit)
	if err != nil {
		return nil, h.problemFor(ctx, err, "list events", "")
	}
	out := &ListEventsOutput{}
	out.Body.Events, out.Body.PageOutput = listPage(evs, limit, eventBody)
	return out, nil
}

func seatCountsBody(c purchase.SeatCounts) SeatCountsBody {
	return SeatCountsBody{Total: c.Total, Available: c.Available, Held: c.Held, Sold: c.Sold, Refunded: c.Refunded, Blocked: c.Blocked}
}

func (h *Handlers) getEventSales(ctx context.Context, in *EventPathInput) (*SalesOutput, error) {
	s, eventID, err := onEvent(ctx, h, in.EventID, "get event sales", func(c *cells.Cell, eventID uuid.UUID) (purchase.Sales, error) {
		return c.Purchase.Sales(ctx, identity(ctx).OrganizerID, eventID)
	})
	if err != nil {
		return nil, err
	}
	body := SalesBody{
		EventID:   eventID,
		Seats:     seatCountsBody(s.Seats),
		CheckedIn: s.CheckedIn, OrdersByStatus: make(map[string]int, len(s.OrdersByStatus)),
		GrossMinor: s.GrossMinor, RefundedMinor: s.RefundedMinor, NetMinor: s.NetMinor, Currency: s.Currency,
	}
	for st, n := range s.OrdersByStatus {
		body.OrdersByStatus[string(st)] = n
	}
	body.OrdersByChannel = make(map[string]int, len(s.OrdersByChannel))
	for ch, n := range s.OrdersByChannel {
		body.OrdersByChannel[string(ch)] = n
	}
	body.BoxOfficeMinor = s.BoxOfficeMinor
	body.ByCategory = make([]CategorySalesBody, len(s.ByCategory))
	for i, c := range s.ByCategory {
		body.ByCategory[i] = CategorySalesBody{CategoryID: c.ID, Name: c.Name, PriceMinor: c.PriceMinor, Seats: seatCountsBody(c.Seats)}
	}
	return &SalesOutput{Body: body}, nil
}

func (h *Handlers) listEventOrders(ctx context.Context, in *ListEventOrdersInput) (*ListEventOrdersOutput, error) {
	eventID, err := parseUUID(in.EventID, "path.eventId")
	if err != nil {
		return nil, err
	}
	f, err := orderFilter("", in.Status, in.Cursor, in.Limit)
	if err != nil {
		return nil, err
	}
	if in.BuyerID != "" {
		id, err := parseUUID(in.BuyerID, "query.buyerId")
		if err != nil {
			return nil, err
		}
		f.UserID = &id
	}
	if f.Limit == 0 {
		f.Limit = 50
	}
	c, err := h.eventCell(ctx, eventID)
	if err != nil {
		return nil, err
	}
	orders, err := c.Purchase.EventOrders(ctx, identity(ctx).OrganizerID, eventID, f)
	if err != nil {
		return nil, h.problemFor(ctx, err, "list event orders", "No such event.", "event_id", eventID)
	}
	out := &ListEventOrdersOutput{}
	out.Body.Orders, out.Body.PageOutput = listPage(orders, f.Limit, eventOrderBody)
	return out, nil
}

func eventOrderBody(o purchase.EventOrder) EventOrderBody {
	return EventOrderBody{
		ID: o.ID, BuyerID: o.UserID, Status: string(o.Status), AmountMinor: o.AmountMinor, Currency: o.Currency,
		SeatCount: o.SeatCount, CreatedAt: o.CreatedAt.UTC(), UpdatedAt: o.UpdatedAt.UTC(),
		Channel: string(o.Channel), Reference: o.Reference,
	}
}
