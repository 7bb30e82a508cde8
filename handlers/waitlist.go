package handlers

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"boxoffice/domain/cells"
	"boxoffice/domain/purchase"
	"boxoffice/domain/waitingroom"
	"boxoffice/domain/waitlist"
	"boxoffice/platform/orderfeed"
)

// JoinWaitlistInput joins an event's waitlist.
type JoinWaitlistInput struct {
	EventPathInput
	Body struct {
		CategoryID uuid.UUID `json:"categoryId" doc:"The price category whose seats you wait for (see the event's seat map)."`
		Quantity   int       `json:"quantity" minimum:"1" maximum:"8" example:"2" doc:"How many seats, offered together or not at all."`
	}
}

// WaitlistEntryPathInput names one waitlist entry of an event.
type WaitlistEntryPathInput struct {
	EventPathInput
	EntryID string `path:"entryId" format:"uuid" doc:"Waitlist entry id (UUID)."`
}

// WaitlistEntryBody is a buyer's waitlist entry.
type WaitlistEntryBody struct {
	ID         uuid.UUID `json:"id"`
	EventID    uuid.UUID `json:"eventId"`
	CategoryID uuid.UUID `json:"categoryId"`
	Quantity   int       `json:"quantity"`
	State      string    `json:"state" enum:"waiting,offered,accepted,expired,left" doc:"waiting: in the queue; offered: seats are reserved for you until offerExpiresAt (accept to hold them); accepted: the seats are held by orderId (pay it as any order); expired: the offer was not accepted in time and passed to the next buyer; left: you left."`
	Ahead      int       `json:"ahead" doc:"While waiting: how many entries of the same category are before yours."`
	// OfferedSeats is set while an offer is live.
	OfferedSeats   []uuid.UUID `json:"offeredSeats" doc:"The seats reserved for you while an offer is live; empty otherwise."`
	OfferedAt      *time.Time  `json:"offeredAt,omitempty" doc:"When the last offer was made."`
	OfferExpiresAt *time.Time  `json:"offerExpiresAt,omitempty" doc:"When the last offer ends (passes to the next buyer) unless accepted."`
	OrderID        *uuid.UUID  `json:"orderId,omitempty" doc:"The order holding the seats of the accepted offer."`
	CreatedAt      time.Time   `json:"createdAt"`
	UpdatedAt      time.Time   `json:"updatedAt"`
}

// WaitlistEntryOutput is a waitlist entry.
type WaitlistEntryOutput struct {
	Body WaitlistEntryBody
}

func waitlistEntryBody(e waitlist.Entry) *WaitlistEntryOutput {
	return &WaitlistEntryOutput{Body: WaitlistEntryBody{
		ID: e.ID, EventID: e.EventID, CategoryID: e.CategoryID, Quantity: e.Quantity, State: string(e.State), Ahead: e.Ahead,
		OfferedSeats: e.OfferedSeats, OfferedAt: e.OfferedAt, OfferExpiresAt: e.OfferExpiresAt, OrderID: e.OrderID,
		CreatedAt: e.CreatedAt, UpdatedAt: e.UpdatedAt,
	}}
}

func (h *Handlers) joinWaitlist(ctx context.Context, in *JoinWaitlistInput) (*WaitlistEntryOutput, error) {
	e, eventID, err := onEvent(ctx, h, in.EventID, "join waitlist", func(c *cells.Cell, eventID uuid.UUID) (waitlist.Entry, error) {
		return c.Waitlist.Join(ctx, waitlist.JoinParams{
			UserID: identity(ctx).UserID, EventID: eventID, CategoryID: in.Body.CategoryID, Quantity: in.Body.Quantity,
			CorrelationID: CorrelationID(ctx),
		})
	})
	if err != nil {
		return nil, err
	}
	h.logger.InfoContext(ctx, "waitlist joined", "correlation_id", CorrelationID(ctx), "event_id", eventID, "entry_id", e.ID)
	return waitlistEntryBody(e), nil
}

// waitlistEntry parses the path and returns the entry's cell and ids, or
// the 422, 404 or 503 problem; an entry of another event is not found.
func (h *Handlers) waitlistEntry(ctx context.Context, in *WaitlistEntryPathInput) (*cells.Cell, uuid.UUID, uuid.UUID, error) {
	c, eventID, err := h.eventPath(ctx, in.EventID)
	if err != nil {
		return nil, eventID, uuid.Nil, err
	}
	entryID, err := parseUUID(in.EntryID, "path.entryId")
	if err != nil {
		return nil, eventID, entryID, err
	}
	e, err := c.Waitlist.Get(ctx, identity(ctx).UserID, entryID)
	if err == nil && e.EventID != eventID {
		err = waitlist.ErrEntryNotFound
	}
	if err != nil {
		return nil, eventID, entryID, h.problemFor(ctx, err, "get waitlist entry", "No such waitlist entry.", "entry_id", entryID)
	}
	return c, eventID, entryID, nil
}

func (h *Handlers) getWaitlistEntry(ctx context.Context, in *WaitlistEntryPathInput) (*WaitlistEntryOutput, error) {
	return h.buyerEntry(ctx, in, "get waitlist entry", (*waitlist.Service).Get)
}

func (h *Handlers) leaveWaitlist(ctx context.Context, in *WaitlistEntryPathInput) (*WaitlistEntryOutput, error) {
	return h.buyerEntry(ctx, in, "leave waitlist", (*waitlist.Service).Leave)
}

// buyerEntry is an operation of the buyer on their waitlist entry: it
// finds the entry (waitlistEntry's 422, 404 or 503), has do act for the
// caller on it in its cell's waitlist, and answers the entry. do's errors
// are mapped by problemFor, op naming the operation.
func (h *Handlers) buyerEntry(ctx context.Context, in *WaitlistEntryPathInput, op string,
	do func(s *waitlist.Service, ctx context.Context, userID, entryID uuid.UUID) (waitlist.Entry, error),
) (*WaitlistEntryOutput, error) {
	c, _, entryID, err := h.waitlistEntry(ctx, in)
	if err != nil {
		return nil, err
	}
	e, err := do(c.Waitlist, ctx, identity(ctx).UserID, entryID)
	if err != nil {
		return nil, h.problemFor(ctx, err, op, "No such waitlist entry.", "entry_id", entryID)
	}
	return waitlistEntryBody(e), nil
}

func (h *Handlers) acceptWaitlistOffer(ctx context.Context, in *WaitlistEntryPathInput) (*WaitlistEntryOutput, error) {
	c, eventID, entryID, err := h.waitlistEntry(ctx, in)
	if err != nil {
		return nil, err
	}
	e, err := c.Waitlist.Accept(ctx, waitlist.AcceptParams{
		UserID: identity(ctx).UserID, EntryID: entryID, CorrelationID: CorrelationID(ctx), Rules: c.Room,
	})
	switch {
	case errors.Is(err, purchase.ErrSeatLimitUnknown) && errors.Is(err, waitingroom.ErrUnavailable):
		h.logger.WarnContext(ctx, "seat limit unknown", "correlation_id", CorrelationID(ctx), "event_id", eventID, "error", err.Error())
		return nil, huma.ErrorWithHeaders(problem(http.StatusServiceUnavailable, TypeUnavailable,
			"The onsale's settings cannot be read right now; nothing was held. Try again shortly."), retryAfter(2*time.Second))
	case errors.Is(err, purchase.ErrSeatLimitUnknown):
		return nil, h.internal(ctx, "read seat limit", err, "event_id", eventID)
	case err != nil:
		return nil, h.problemFor(ctx, err, "accept waitlist offer", "No such waitlist entry.", "entry_id", entryID)
	}
	if e.OrderID != nil {
		h.cells.RememberOrder(*e.OrderID, c)
	}
	h.logger.InfoContext(ctx, "waitlist offer accepted", "correlation_id", CorrelationID(ctx), "event_id", eventID, "entry_id", entryID)
	return waitlistEntryBody(e), nil
}

// The waitlist entry's event stream tells its buyer of an offer as it is
// made: it watches the entry on the cell's order feed (WaitlistOffered is
// published with the entry as its aggregate) and reads the entry when
// woken, while an offer is live at its expiry, and otherwise every
// waitlistPollHealthy (every orderEventsPollInterval while the feed cannot
// tell it of changes, or when there is none).
const (
	waitlistPollHealthy = 5 * time.Second
	// waitlistExpirySlack is how long after an offer's expiry the stream
	// reads again: the sweeper ends it within about a second.
	waitlistExpirySlack = 1500 * time.Millisecond
)

// WaitlistEntryStreamInput opens a waitlist entry's event stream.
type WaitlistEntryStreamInput struct {
	WaitlistEntryPathInput
}

func (h *Handlers) streamWaitlistEntry(ctx context.Context, in *WaitlistEntryStreamInput) (*huma.StreamResponse, error) {
	userID := identity(ctx).UserID
	o, err := h.openStream(userID, "You have too many event streams open; close one first.")
	if err != nil {
		return nil, err
	}
	defer o.abandon()
	c, _, entryID, err := h.waitlistEntry(ctx, &in.WaitlistEntryPathInput)
	if err != nil {
		return nil, err
	}
	watch := o.watchOn(c, entryID)
	first, err := c.Waitlist.Get(ctx, userID, entryID)
	if err != nil {
		return nil, h.problemFor(ctx, err, "get waitlist entry", "No such waitlist entry.", "entry_id", entryID)
	}
	return sseStream(ctx, o.start(), func(ctx context.Context, w *sseWriter) {
		h.followWaitlistEntry(ctx, w, c, first, watch)
	}), nil
}

// followWaitlistEntry writes an `entry` event for first and then for each
// change of the entry read, until its state is final, the stream's
// lifetime ends, the client goes away, or a write or read fails.
func (h *Handlers) followWaitlistEntry(ctx context.Context, w *sseWriter, c *cells.Cell, first waitlist.Entry, watch *orderfeed.Watcher) {
	send := func(e waitlist.Entry) bool {
		return w.event("", "entry", waitlistEntryBody(e).Body)
	}
	final := func(e waitlist.Entry) bool {
		return e.State == waitlist.StateAccepted || e.State == waitlist.StateExpired || e.State == waitlist.StateLeft
	}
	last := first
	if !send(last) || final(last) {
		return
	}
	readAfter := func() time.Duration {
		d := waitlistPollHealthy
		if c.Orders == nil || !c.Orders.Healthy() {
			d = h.cfg.orderStreamPoll()
		}
		if last.State == waitlist.StateOffered && last.OfferExpiresAt != nil {
			d = min(d, max(time.Until(*last.OfferExpiresAt)+waitlistExpirySlack, h.cfg.orderStreamPoll()))
		}
		return d
	}
	h.followFeed(ctx, w, feedFollower{
		watch:     watch,
		firstRead: readAfter(),
		// The events say only that the entry changed: every one is a read.
		woken: func([]orderfeed.Event, bool) (read, ok bool) { return true, true },
		read: func(ctx context.Context, schedule func(time.Duration)) bool {
			e, err := c.Waitlist.Get(ctx, last.UserID, last.ID)
			if err != nil {
				if ctx.Err() == nil {
					h.logger.ErrorContext(ctx, "read waitlist entry", "entry_id", last.ID, "error", err.Error())
				}
				return false
			}
			if e.State != last.State || !e.UpdatedAt.Equal(last.UpdatedAt) {
				last = e
				if !send(e) || final(e) {
					return false
				}
			}
			schedule(readAfter())
			return true
		},
	})
}
