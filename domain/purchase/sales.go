package purchase

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/db"
	"boxoffice/platform/page"
	"boxoffice/sqlcgen"
)

// Sales is an event's sales at one snapshot of its database.
type Sales struct {
	// Seats counts each seat once, by what it is now: Sold (a live
	// ticket), else Held (a hold owns it), else Blocked (the organizer
	// holds it back), else Refunded (its ticket was revoked by a refund:
	// off sale), else Available.
	Seats SeatCounts
	// ByCategory counts the seats of each price category the same way, in
	// the organizer's order of the categories.
	ByCategory []CategorySales
	// CheckedIn is how many tickets were used at the door.
	CheckedIn int
	// OrdersByChannel counts the event's orders by Channel, every channel
	// included.
	OrdersByChannel map[Channel]int
	// BoxOfficeMinor is the part of GrossMinor paid at the box office,
	// outside the payment provider.
	BoxOfficeMinor int64
	// OrdersByStatus counts the event's orders in each status, every
	// status included.
	OrdersByStatus map[OrderStatus]int
	// GrossMinor is what buyers paid (orders whose money was captured:
	// OrderStatus.Captured), RefundedMinor what was refunded, NetMinor the
	// difference; in the event's currency.
	GrossMinor, RefundedMinor, NetMinor int64
	Currency                            string
}

// SeatCounts are an event's seats by what they are now.
type SeatCounts struct {
	Total, Available, Held, Sold, Refunded, Blocked int
}

// CategorySales are the seats of one price category by what they are now.
type CategorySales struct {
	ID         uuid.UUID
	Name       string
	PriceMinor int64
	Seats      SeatCounts
}

// categorySalesRow is one element of EventSales' by_category.
type categorySalesRow struct {
	ID         uuid.UUID `json:"id"`
	Name       string    `json:"name"`
	PriceMinor int64     `json:"price_minor"`
	Total      int       `json:"total"`
	Available  int       `json:"available"`
	Held       int       `json:"held"`
	Sold       int       `json:"sold"`
	Refunded   int       `json:"refunded"`
	Blocked    int       `json:"blocked"`
}

// OrganizedEvent returns the event if organizerID organizes it, else
// ErrEventNotFound: another organizer's event does not exist for them.
// It reads through q (a pool or a transaction).
func OrganizedEvent(ctx context.Context, q db.DBTX, organizerID, eventID uuid.UUID) (sqlcgen.Event, error) {
	ev, err := sqlcgen.New().EventGetByID(ctx, db.Interpreting(q), eventID)
	if errors.Is(err, db.ErrNotFound) || err == nil && ev.OrganizerID != organizerID {
		return sqlcgen.Event{}, ErrEventNotFound
	} else if err != nil {
		return sqlcgen.Event{}, fmt.Errorf("get event: %w", err)
	}
	return ev, nil
}

// Sales returns the sales of the event organizerID organizes (else
// ErrEventNotFound), read in one statement so every figure is of the same
// moment.
func (s *Service) Sales(ctx context.Context, organizerID, eventID uuid.UUID) (Sales, error) {
	ev, err := OrganizedEvent(ctx, s.pool, organizerID, eventID)
	if err != nil {
		return Sales{}, err
	}
	var captured []string
	for _, st := range OrderStatuses {
		if st.Captured() {
			captured = append(captured, string(st))
		}
	}
	row, err := sqlcgen.New().EventSales(ctx, s.read(), sqlcgen.EventSalesParams{
		EventID: eventID, CapturedStatuses: captured, RefundedStatus: string(OrderRefunded),
	})
	if err != nil {
		return Sales{}, fmt.Errorf("read sales: %w", err)
	}
	var byStatus map[string]int
	if err := json.Unmarshal(row.OrdersByStatus, &byStatus); err != nil {
		return Sales{}, fmt.Errorf("read sales: orders by status: %w", err)
	}
	var byChannel map[string]int
	if err := json.Unmarshal(row.OrdersByChannel, &byChannel); err != nil {
		return Sales{}, fmt.Errorf("read sales: orders by channel: %w", err)
	}
	var byCategory []categorySalesRow
	if err := json.Unmarshal(row.ByCategory, &byCategory); err != nil {
		return Sales{}, fmt.Errorf("read sales: by category: %w", err)
	}
	out := Sales{
		Seats: SeatCounts{
			Total: int(row.SeatsTotal), Available: int(row.SeatsAvailable), Held: int(row.SeatsHeld),
			Sold: int(row.SeatsSold), Refunded: int(row.SeatsRefunded), Blocked: int(row.SeatsBlocked),
		},
		OrdersByChannel: make(map[Channel]int, 3),
		BoxOfficeMinor:  row.BoxOfficeMinor,
		CheckedIn:       int(row.CheckedIn),
		OrdersByStatus:  make(map[OrderStatus]int, len(OrderStatuses)),
		GrossMinor:      row.GrossMinor, RefundedMinor: row.RefundedMinor, NetMinor: row.GrossMinor - row.RefundedMinor,
		Currency: ev.Currency,
	}
	for _, st := range OrderStatuses {
		out.OrdersByStatus[st] = byStatus[string(st)]
	}
	for _, ch := range []Channel{ChannelOnline, ChannelComp, ChannelBoxOffice} {
		out.OrdersByChannel[ch] = byChannel[string(ch)]
	}
	out.ByCategory = make([]CategorySales, len(byCategory))
	for i, c := range byCategory {
		out.ByCategory[i] = CategorySales{
			ID: c.ID, Name: c.Name, PriceMinor: c.PriceMinor,
			Seats: SeatCounts{Total: c.Total, Available: c.Available, Held: c.Held, Sold: c.Sold, Refunded: c.Refunded, Blocked: c.Blocked},
		}
	}
	return out, nil
}

// EventOrder is an order as the organizer of its event sees it.
type EventOrder struct {
	ID, UserID           uuid.UUID
	Status               OrderStatus
	AmountMinor          int64
	Currency             string
	SeatCount            int
	CreatedAt, UpdatedAt time.Time
	// Channel says whether a buyer (ChannelOnline) or the organizer (a
	// comp, a box office sale) made the order; Reference is what paid a
	// box office sale (or the organizer's note on a comp), else empty.
	Channel   Channel
	Reference string
}

// Cursor is the position of o in a list of orders.
func (o EventOrder) Cursor() page.Cursor { return page.Cursor{CreatedAt: o.CreatedAt, ID: o.ID} }

// EventOrders returns the orders of the event organizerID organizes (else
// ErrEventNotFound), newest first, filtered by f (its UserID, Statuses,
// Before and Limit; EventID is the event's).
func (s *Service) EventOrders(ctx context.Context, organizerID, eventID uuid.UUID, f OrderFilter) ([]EventOrder, error) {
	if _, err := OrganizedEvent(ctx, s.pool, organizerID, eventID); err != nil {
		return nil, err
	}
	beforeAt, beforeID := f.before()
	rows, err := sqlcgen.New().OrderListByEvent(ctx, s.read(), sqlcgen.OrderListByEventParams{
		EventID: eventID, UserID: f.UserID, Statuses: f.statuses(),
		BeforeCreatedAt: beforeAt, BeforeID: beforeID, MaxRows: int32(f.limit()),
	})
	if err != nil {
		return nil, fmt.Errorf("list event orders: %w", err)
	}
	out := make([]EventOrder, len(rows))
	for i, r := range rows {
		out[i] = EventOrder{
			ID: r.ID, UserID: r.UserID, Status: OrderStatus(r.Status), AmountMinor: r.AmountMinor,
			Currency: r.Currency, SeatCount: int(r.SeatCount), CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
			Channel: Channel(r.Channel),
		}
		if r.ExternalReference != nil {
			out[i].Reference = *r.ExternalReference
		}
	}
	return out, nil
}
