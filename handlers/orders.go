package handlers

import (
	"bytes"
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/domain/cells"
	"boxoffice/domain/purchase"
	"boxoffice/platform/backoff"
	"boxoffice/platform/orderfeed"
)

// OrderPathInput names an order.
type OrderPathInput struct {
	OrderID string `path:"orderId" format:"uuid" doc:"Order id (UUID)."`
}

// OrderHoldBody is the hold of an order.
type OrderHoldBody struct {
	ID        uuid.UUID   `json:"id"`
	Status    string      `json:"status" enum:"active,confirmed,expired,released"`
	ExpiresAt time.Time   `json:"expiresAt"`
	SeatIDs   []uuid.UUID `json:"seatIds"`
	// PaymentGrace is set when the hold was kept longer for a payment
	// being confirmed.
	PaymentGrace bool `json:"paymentGrace,omitempty" doc:"The hold was kept a bounded grace longer (expiresAt includes it) because its payment was being confirmed, e.g. by 3-D Secure."`
}

// OrderPaymentBody is the payment of an order.
type OrderPaymentBody struct {
	Status          string `json:"status"`
	PaymentIntentID string `json:"paymentIntentId,omitempty"`
	ClientSecret    string `json:"clientSecret,omitempty" doc:"For confirming the payment; present only while payment is pending."`
}

// OrderTicketBody is one ticket of an order.
type OrderTicketBody struct {
	ID        uuid.UUID  `json:"id"`
	SeatID    uuid.UUID  `json:"seatId"`
	IssuedAt  time.Time  `json:"issuedAt"`
	QRPayload string     `json:"qrPayload,omitempty" doc:"What the ticket's QR code encodes: a payload signed with Ed25519 that scanners verify offline with the key at /v1/ticket-signing-key."`
	RevokedAt *time.Time `json:"revokedAt,omitempty" doc:"Set when a refund revoked the ticket: it admits nobody, and it is on the event's revocation list."`
}

// OrderBody is an order as its owner sees it.
type OrderBody struct {
	ID          uuid.UUID         `json:"id"`
	EventID     uuid.UUID         `json:"eventId"`
	Status      string            `json:"status" enum:"pending_payment,authorized,capture_pending,paid,ticketed,failed,canceled,refunding,refunded"`
	AmountMinor int64             `json:"amountMinor"`
	Currency    string            `json:"currency"`
	CreatedAt   time.Time         `json:"createdAt"`
	Hold        OrderHoldBody     `json:"hold"`
	Payment     *OrderPaymentBody `json:"payment,omitempty" doc:"The order's payment at the provider; absent until its PaymentIntent exists."`
	Tickets     []OrderTicketBody `json:"tickets"`
	LastDecline *DeclineBody      `json:"lastDecline,omitempty" doc:"The last declined payment attempt. While the order awaits payment and attempts are left, confirm the same PaymentIntent again (with another card)."`
	// PaymentAttemptsLeft is how many more times the buyer may try.
	PaymentAttemptsLeft int               `json:"paymentAttemptsLeft" doc:"How many more times you may try to pay while the order awaits payment; 0 once it does not."`
	Refunds             []OrderRefundBody `json:"refunds" doc:"Refunds of selected tickets, oldest first. A refund of the whole order shows as its status (refunding, refunded) instead."`
}

// OrderRefundBody is a refund of selected tickets of an order.
type OrderRefundBody struct {
	ID          uuid.UUID   `json:"id"`
	TicketIDs   []uuid.UUID `json:"ticketIds" doc:"The tickets refunded: revoked, and refused at the door."`
	AmountMinor int64       `json:"amountMinor" doc:"The refunded amount: the prices of the tickets' seats."`
	Status      string      `json:"status" enum:"requested,succeeded" doc:"requested: sent to the payment provider. succeeded: the provider confirmed it."`
	RequestedAt time.Time   `json:"requestedAt"`
	SucceededAt *time.Time  `json:"succeededAt,omitempty"`
}

// DeclineBody is a declined payment attempt.
type DeclineBody struct {
	Code       string    `json:"code" example:"insufficient_funds" doc:"The provider's decline code."`
	Message    string    `json:"message" example:"Your card has insufficient funds." doc:"What to tell the buyer."`
	DeclinedAt time.Time `json:"declinedAt"`
}

// OrderOutput is an order response.
type OrderOutput struct {
	Body OrderBody
}

// ListOrdersInput selects the caller's orders.
type ListOrdersInput struct {
	EventID string `query:"eventId" format:"uuid" doc:"Only the orders of this event."`
	Status  string `query:"status" maxLength:"200" example:"ticketed,refunded" doc:"Only orders in these statuses: one status, or several separated by commas."`
	Cursor  string `query:"cursor" maxLength:"200" doc:"nextCursor of the previous page."`
	Limit   int    `query:"limit" minimum:"1" maximum:"100" default:"20"`
}

// ListOrdersOutput is a page of the caller's orders.
type ListOrdersOutput struct {
	Body struct {
		Orders []OrderBody `json:"orders" doc:"Newest first, each as GET /v1/orders/{orderId} shows it."`
		PageOutput
	}
}

// orderFilter reads the filters and page of a list of orders.
func orderFilter(eventID, status, cursor string, limit int) (purchase.OrderFilter, error) {
	f := purchase.OrderFilter{Limit: limit}
	if eventID != "" {
		id, err := parseUUID(eventID, "query.eventId")
		if err != nil {
			return f, err
		}
		f.EventID = &id
	}
	if status != "" {
		for _, name := range strings.Split(status, ",") {
			st, ok := purchase.ParseOrderStatus(strings.TrimSpace(name))
			if !ok {
				return f, invalid("query.status", "unknown order status")
			}
			f.Statuses = append(f.Statuses, st)
		}
	}
	var err error
	f.Before, err = parseCursor(cursor)
	return f, err
}

// listOrders reads the caller's orders from every cell that may hold some
// (the event's cell alone when the list is of one event) and merges the
// pages newest first.
func (h *Handlers) listOrders(ctx context.Context, in *ListOrdersInput) (*ListOrdersOutput, error) {
	f, err := orderFilter(in.EventID, in.Status, in.Cursor, in.Limit)
	if err != nil {
		return nil, err
	}
	if f.Limit == 0 {
		f.Limit = 20
	}
	var cs []*cells.Cell
	if f.EventID != nil {
		c, err := h.eventCell(ctx, *f.EventID)
		if err != nil {
			return nil, err
		}
		cs = []*cells.Cell{c}
	} else {
		cs = h.cells.Cells()
	}
	var orders []purchase.Order
	for _, c := range cs {
		os, err := c.Purchase.Orders(ctx, identity(ctx).UserID, f)
		if err != nil {
			return nil, h.problemFor(ctx, err, "list orders", "")
		}
		orders = append(orders, os...)
	}
	slices.SortFunc(orders, func(a, b purchase.Order) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), bytes.Compare(b.ID[:], a.ID[:]))
	})
	out := &ListOrdersOutput{}
	out.Body.Orders, out.Body.PageOutput = listPage(orders, f.Limit, orderBody)
	return out, nil
}

func (h *Handlers) getOrder(ctx context.Context, in *OrderPathInput) (*OrderOutput, error) {
	return h.buyerOrder(ctx, in.OrderID, "get order", (*purchase.Service).Order)
}

// buyerOrder is an operation of the buyer on their order: it finds the
// order's cell (orderPath's 422, 404 or 503), has do act for the caller
// on the order in that cell's purchase service, and answers the order as
// its owner sees it (orderBody). do's errors are mapped by problemFor,
// op naming the operation; an order of someone else's is a 404.
func (h *Handlers) buyerOrder(ctx context.Context, raw, op string,
	do func(s *purchase.Service, ctx context.Context, userID, orderID uuid.UUID) (purchase.Order, error),
) (*OrderOutput, error) {
	c, orderID, err := h.orderPath(ctx, raw)
	if err != nil {
		return nil, err
	}
	o, err := do(c.Purchase, ctx, identity(ctx).UserID, orderID)
	if err != nil {
		return nil, h.problemFor(ctx, err, op, "No such order.", "order_id", orderID)
	}
	return &OrderOutput{Body: orderBody(o)}, nil
}

// orderBody is what the owner sees of o (purchase decides whether the
// client secret is shown).
func orderBody(o purchase.Order) OrderBody {
	body := OrderBody{
		ID: o.ID, EventID: o.EventID, Status: string(o.Status), AmountMinor: o.AmountMinor, Currency: o.Currency,
		CreatedAt: o.CreatedAt.UTC(),
		Hold: OrderHoldBody{ID: o.HoldID, Status: string(o.HoldStatus), ExpiresAt: o.HoldExpiresAt.UTC(), SeatIDs: o.SeatIDs,
			PaymentGrace: o.HoldGraced},
		Tickets: make([]OrderTicketBody, 0, len(o.Tickets)),
		Refunds: make([]OrderRefundBody, 0, len(o.Refunds)),
	}
	for _, r := range o.Refunds {
		rb := OrderRefundBody{ID: r.ID, TicketIDs: r.TicketIDs, AmountMinor: r.AmountMinor, Status: r.Status, RequestedAt: r.RequestedAt.UTC()}
		if r.SucceededAt != nil {
			at := r.SucceededAt.UTC()
			rb.SucceededAt = &at
		}
		body.Refunds = append(body.Refunds, rb)
	}
	body.PaymentAttemptsLeft = o.PaymentAttemptsLeft
	if d := o.LastDecline; d != nil {
		body.LastDecline = &DeclineBody{Code: d.Code, Message: d.Message, DeclinedAt: d.At.UTC()}
	}
	if p := o.Payment; p != nil {
		body.Payment = &OrderPaymentBody{Status: p.Status, PaymentIntentID: p.PaymentIntentID, ClientSecret: p.ClientSecret}
	}
	for _, t := range o.Tickets {
		tb := OrderTicketBody{ID: t.ID, SeatID: t.SeatID, IssuedAt: t.IssuedAt.UTC(), QRPayload: t.QRPayload}
		if t.RevokedAt != nil {
			at := t.RevokedAt.UTC()
			tb.RevokedAt = &at
		}
		body.Tickets = append(body.Tickets, tb)
	}
	return body
}

func (h *Handlers) cancelOrder(ctx context.Context, in *OrderPathInput) (*OrderOutput, error) {
	return h.buyerOrder(ctx, in.OrderID, "cancel order", (*purchase.Service).Cancel)
}

// OrderStateBody is an order's status as the organizer of its event sees
// it.
type OrderStateBody struct {
	ID      uuid.UUID `json:"id"`
	EventID uuid.UUID `json:"eventId"`
	Status  string    `json:"status" enum:"pending_payment,authorized,capture_pending,paid,ticketed,failed,canceled,refunding,refunded"`
}

func orderStateBody(st purchase.OrderState) OrderStateBody {
	return OrderStateBody{ID: st.ID, EventID: st.EventID, Status: string(st.Status)}
}

// OrderStateOutput is an order status response.
type OrderStateOutput struct {
	Body OrderStateBody
}

// RefundOrderInput names the order to refund, with the organizer's choice
// for its seats.
type RefundOrderInput struct {
	OrderPathInput
	IdempotencyKeyHeader
	Body *struct {
		Resell    bool        `json:"resell,omitempty" doc:"Put the refunded tickets' seats back on sale (true), or keep them off sale (false, the default). The tickets are revoked either way."`
		TicketIDs []uuid.UUID `json:"ticketIds,omitempty" maxItems:"100" uniqueItems:"true" doc:"Refund only these tickets of a ticketed order (a partial refund): their seats' prices are refunded, they are revoked, and the order stays ticketed with its other tickets. Naming every ticket the order has left refunds the whole order. Tickets refunded already are skipped. Omit to refund the whole order (what earlier partial refunds left of it)."`
	}
}

func (h *Handlers) refundOrder(ctx context.Context, in *RefundOrderInput) (*OrderStateOutput, error) {
	c, orderID, err := h.orderPath(ctx, in.OrderID)
	if err != nil {
		return nil, err
	}
	var opts purchase.RefundOptions
	if in.Body != nil {
		opts.Resell, opts.TicketIDs = in.Body.Resell, in.Body.TicketIDs
	}
	organizer := identity(ctx).OrganizerID
	body, replayed, err := idempotently(ctx, c, idempotentRequest{op: "refund-order", key: in.IdempotencyKey, parts: []any{orderID, in.Body}},
		func(ctx context.Context, tx pgx.Tx) (OrderStateBody, error) {
			st, err := c.Purchase.RefundTx(ctx, tx, organizer, orderID, opts)
			return orderStateBody(st), err
		},
		func(ctx context.Context) (OrderStateBody, error) {
			st, err := c.Purchase.Refund(ctx, organizer, orderID, opts)
			return orderStateBody(st), err
		})
	if err != nil {
		return nil, h.problemFor(ctx, err, "refund order", "No such order.", "order_id", orderID)
	}
	if replayed {
		h.logger.InfoContext(ctx, "refund request replayed", "correlation_id", CorrelationID(ctx), "order_id", orderID)
	}
	return &OrderStateOutput{Body: body}, nil
}

// OrderStatusEvent is the data of one `status` event of an order's event
// stream.
type OrderStatusEvent struct {
	OrderID uuid.UUID `json:"orderId"`
	Status  string    `json:"status" enum:"pending_payment,authorized,capture_pending,paid,ticketed,failed,canceled,refunding,refunded"`
	At      time.Time `json:"at" doc:"When the order took this status, as its writer recorded it on the order or on the event of the change; when the writer recorded no time, when the stream saw the change."`
}

// OrderPaymentEvent is the data of the `payment` event of an order's event
// stream: the order's PaymentIntent exists and can be confirmed. It never
// carries the client secret.
type OrderPaymentEvent struct {
	OrderID         uuid.UUID `json:"orderId"`
	PaymentIntentID string    `json:"paymentIntentId"`
}

// The order event stream reads its order once, when it opens, and then
// shows each change from the content of the change's event, which the
// cell's order feed delivers (purchase.OrderChangeOf: the status an event
// leaves the order in, the PaymentIntent it records, when it occurred),
// without reading the order again. It reads the order only when what it
// was told is not enough to know it:
//
//   - for an event whose content does not say what the order is now
//     (AuthorizationCancelRequested, a type this version does not know),
//     one read for that wake;
//   - after an event whose consumer may change the status with no event
//     of its own (the feed's follow-up: PaymentRefunded makes refunding
//     refunded, PaymentFailed may fail the order silently), one read
//     then more at growing intervals, from orderEventsSettleFirst to
//     orderEventsSettleRead, for orderEventsSettleWindow;
//   - when the feed says it may have missed events (it lost the bus, or
//     follows it again), one read, and while the feed cannot follow the
//     bus or when there is none, every orderEventsPollInterval;
//   - every orderEventsSafetyRead, a slow safety read that bounds the wait
//     should an event ever be missed.
//
// A status held for less than the time between two reads may be skipped,
// which is why the events carry the status, not a transition.
//
// Each event's id names the status it reports (orderEventID); a client
// that reconnects with Last-Event-ID is sent the current status only if
// it is not the one it last received (the id's status part is compared:
// the time in it is the event's or the order row's, by two clocks).
const (
	orderEventsPollInterval = 250 * time.Millisecond
	orderEventsSafetyRead   = time.Minute
	// For orderEventsSettleWindow after a follow-up event, a stream reads
	// after orderEventsSettleFirst, then at twice the interval each time
	// up to orderEventsSettleRead: what the consumer does with the event
	// may change the order without an event of its own.
	orderEventsSettleWindow = 10 * time.Second
	orderEventsSettleFirst  = 50 * time.Millisecond
	orderEventsSettleRead   = time.Second
	orderEventsMaxLifetime  = 10 * time.Minute
	// Every orderEventsHeartbeat, to within orderEventsHeartbeatTick, a
	// stream writes a comment line; the process's streams share one clock
	// that ticks every orderEventsHeartbeatTick (streamClock).
	orderEventsHeartbeat     = 15 * time.Second
	orderEventsHeartbeatTick = time.Second
	orderEventsWriteTimeout  = 10 * time.Second
)

// orderEventsSettling is the settling reads' schedule: from
// orderEventsSettleFirst, doubling, up to orderEventsSettleRead.
var orderEventsSettling = backoff.Policy{Base: orderEventsSettleFirst, Max: orderEventsSettleRead}

// OrderStreamInput opens an order's event stream.
type OrderStreamInput struct {
	OrderPathInput
	LastEventID string `header:"Last-Event-ID" maxLength:"100" doc:"The id of the last event received, when reconnecting: the current status is sent only if it is another one."`
}

// orderEventID names the status of st: its status and when it took it.
func orderEventID(st purchase.OrderState, at time.Time) string {
	return string(st.Status) + "." + strconv.FormatInt(at.UnixMicro(), 10)
}

// resumes reports whether lastEventID, a client's Last-Event-ID, names
// st's status (orderEventID).
func resumes(lastEventID string, st purchase.OrderState) bool {
	status, _, _ := strings.Cut(lastEventID, ".")
	return status == string(st.Status)
}

// streamOrderEvents opens an order's event stream with one read of the
// order, which checks that the caller owns it. The stream watches the
// order on the cell's feed before that read, so that no change committed
// after the read goes unseen; changes the feed delivers that the read has
// already are known by the lifecycle (followOrder).
func (h *Handlers) streamOrderEvents(ctx context.Context, in *OrderStreamInput) (*huma.StreamResponse, error) {
	orderID, err := parseUUID(in.OrderID, "path.orderId")
	if err != nil {
		return nil, err
	}
	userID := identity(ctx).UserID
	// The buyer's slot is taken before anything reaches the database, the
	// order's once the order is known to be the buyer's, so that nobody
	// else's requests count against it; both are given back, and the
	// watch stopped, when the stream ends, whatever ends it, or when it
	// never starts.
	o, err := h.openStream(userID, "You have too many order event streams open; close one first.")
	if err != nil {
		return nil, err
	}
	defer o.abandon()
	c, err := h.orderCell(ctx, orderID)
	if err != nil {
		return nil, err
	}
	watch := o.watchOn(c, orderID)
	first, err := c.Purchase.OrderStateForOwner(ctx, userID, orderID)
	if err != nil {
		return nil, h.problemFor(ctx, err, "get order status", "No such order.", "order_id", orderID)
	}
	releaseOrder, ok := h.limits.streams.acquireOrder(orderID)
	if !ok {
		return nil, rateLimited("This order has too many event streams open; close one first.", streamRetryAfter)
	}
	o.slot(releaseOrder)
	return sseStream(ctx, o.start(), func(ctx context.Context, w *sseWriter) {
		h.followOrder(ctx, w, c, userID, first, watch, in.LastEventID)
	}), nil
}

// followOrder writes the status events of the order whose state is first
// until the order reaches a final status, the stream's lifetime ends, the
// client goes away or a write or read fails. watch (nil without a feed)
// was started before first was read. lastEventID is the client's
// Last-Event-ID: the first status is not sent again when it names it.
//
// What the stream shows only moves forward along the order lifecycle
// (OrderState.Apply): a status, read or told by an event, is shown only
// if the lifecycle leads to it from the one shown last. Since the
// lifecycle has no cycle, that tells apart the events the watch delivers
// that the opening read already has (their status is the read's or one
// before it: skipped) from those committed after it (applied, in the
// order delivered). The events' times cannot do it (an event's
// occurred_at is its writer's clock, the order's updated_at the
// database's), nor the order's version (the events do not carry it). A
// PaymentIntent is taken once, from the read or the first event that
// names it; the payment event is sent once, while the order awaits
// payment, and never carries the client secret.
func (h *Handlers) followOrder(ctx context.Context, w *sseWriter, c *cells.Cell, userID uuid.UUID, first purchase.OrderState, watch *orderfeed.Watcher, lastEventID string) {
	send := func(st purchase.OrderState, at time.Time) bool {
		return w.event(orderEventID(st, at), "status", OrderStatusEvent{OrderID: st.ID, Status: string(st.Status), At: at.UTC()})
	}
	// The payment event is sent once, when the stream first sees the
	// order's PaymentIntent, while the order awaits payment.
	paymentSent := false
	sendPayment := func(st purchase.OrderState) bool {
		if paymentSent || st.PaymentIntentID == "" || !st.Status.AwaitsPayment() {
			return true
		}
		paymentSent = true
		return w.event("", "payment", OrderPaymentEvent{OrderID: st.ID, PaymentIntentID: st.PaymentIntentID})
	}

	last, lastAt := first, first.UpdatedAt
	// show applies ch to what the stream showed last and writes what is
	// new: the payment event, a status event. It reports false when the
	// stream ends: a write failed, or the status is final.
	show := func(ch purchase.OrderChange) bool {
		next, changed := last.Apply(ch)
		if !changed {
			return true
		}
		if !sendPayment(next) {
			return false
		}
		if next.Status == last.Status {
			last = next
			return true
		}
		at := next.UpdatedAt
		if !at.After(lastAt) {
			at = time.Now() // the writer recorded no later time
		}
		last, lastAt = next, at
		return send(next, at) && !next.Status.Final()
	}

	if !resumes(lastEventID, last) {
		if !send(last, lastAt) {
			return
		}
	} else if !w.write([]byte(": resumed\n\n")) {
		return
	}
	if last.Status.Final() || !sendPayment(last) {
		return
	}
	var settle settling
	h.followFeed(ctx, w, feedFollower{
		watch:     watch,
		firstRead: h.readAfter(c, &settle),
		// The events the watch delivers are shown as they are; one the
		// lifecycle does not know, or a watch that may have missed some,
		// calls for a read.
		woken: func(events []orderfeed.Event, missed bool) (read, ok bool) {
			for _, ev := range events {
				if ev.FollowUp {
					settle = settling{since: time.Now()}
				}
				ch := purchase.OrderChangeOf(ev.Envelope)
				if ch.Unknown {
					missed = true
				} else if !show(ch) {
					return false, false
				}
			}
			return missed, true
		},
		read: func(ctx context.Context, schedule func(time.Duration)) bool {
			schedule(h.readAfter(c, &settle))
			st, err := c.Purchase.OrderStateForOwner(ctx, userID, last.ID)
			if err != nil {
				if ctx.Err() == nil {
					h.logger.ErrorContext(ctx, "read order status", "order_id", last.ID,
						"correlation_id", CorrelationID(ctx), "error", err.Error())
				}
				return false // the client reconnects and gets the current status first
			}
			return show(st.Change())
		},
	})
}

func (c Config) orderStreamSafetyRead() time.Duration {
	if c.OrderStreamSafetyRead > 0 {
		return c.OrderStreamSafetyRead
	}
	return orderEventsSafetyRead
}

// settling is a stream's reads after a follow-up event: since when, and
// how many it has scheduled.
type settling struct {
	since time.Time
	reads int
}

// readAfter is when a stream of c reads its order if nothing wakes it:
// soon while c's feed cannot tell it of changes; at growing intervals
// for a while after a follow-up event (s), because a consumer applies
// that event next and may change the status without an event of its own
// (refunding → refunded does); else rarely, at the safety read's interval
// ±10%. It counts the read it schedules in s.
func (h *Handlers) readAfter(c *cells.Cell, s *settling) time.Duration {
	switch {
	case c.Orders == nil || !c.Orders.Healthy():
		return h.cfg.orderStreamPoll()
	case !s.since.IsZero() && time.Since(s.since) < orderEventsSettleWindow:
		s.reads++
		return min(orderEventsSettling.Delay(s.reads), h.cfg.orderStreamSafetyRead())
	}
	// ±10%: streams opened together (a deploy's reconnections) spread
	// their safety reads out within a few periods instead of reading all
	// at once every period.
	return backoff.Even(0.1).Random(h.cfg.orderStreamSafetyRead())
}

func (c Config) orderStreamPoll() time.Duration {
	if c.OrderStreamPoll > 0 {
		return c.OrderStreamPoll
	}
	return orderEventsPollInterval
}
