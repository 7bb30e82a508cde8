package purchase

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/domain/tickets/ledger"
	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/platform/outbox"
	"boxoffice/sqlcgen"
)

// ErrOrderNotRefundable is returned by Refund for an order that was never
// paid (or whose payment is still being captured): there is nothing to
// refund yet.
var ErrOrderNotRefundable = fault.New(fault.CodeConflict, "order cannot be refunded")

// ErrTicketsNotInOrder is returned by Refund for selected tickets that
// are not all tickets of the order.
var ErrTicketsNotInOrder = fault.New(fault.CodeInvalid, "tickets not in order")

// ReasonRefundByOrganizer is the reason of the RefundRequested that
// Refund emits.
const ReasonRefundByOrganizer = "requested_by_organizer"

// ReasonVoidedByOrganizer is the reason of the OrderCanceled that Refund
// emits for an order the organizer issued (voidIssued).
const ReasonVoidedByOrganizer = "voided_by_organizer"

// Refund starts the refund of a paid or ticketed order, for the organizer
// of the order's event.
//
// In one transaction that locks the order row, a paid or ticketed order
// becomes refunding and RefundRequested (with the order's PaymentIntent)
// goes to the outbox; the payments consumer refunds at the provider, and
// the provider's webhook moves the order to refunded. In that same
// transaction the order gives up what it owns: a ticketed order's tickets
// are revoked (they admit nobody and are on the event's revocation list),
// and their seats are back on sale when opts.Resell is set, else they stay
// off sale; a paid order not ticketed yet has its confirmed hold released
// and its seats back on sale whatever opts says (it owns no ticket that
// could keep them off), and the tickets worker then issues none (it
// issues only for paid orders).
//
// With opts.TicketIDs, only those tickets of a ticketed order are
// refunded (refundTickets): the order stays ticketed with its other
// tickets, unless the selection is every ticket it has left, which is the
// whole refund above. A whole refund after partial ones refunds what they
// left.
//
// An order already refunding or refunded changes nothing and is returned,
// so a retried request asks for one refund. Returns ErrOrderNotFound when
// organizerID does not organize the order's event, ErrTicketsNotInOrder
// when a selected ticket is not the order's, and ErrOrderNotRefundable
// for an order in any other state (or a selection of tickets of an order
// that is not ticketed), and for an order the organizer issued (a comp or
// a box office sale: nothing was paid through the provider).
func (s *Service) Refund(ctx context.Context, organizerID, orderID uuid.UUID, opts RefundOptions) (OrderState, error) {
	return db.WithTxV(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) (OrderState, error) {
		return s.RefundTx(ctx, tx, organizerID, orderID, opts)
	})
}

// RefundTx is Refund in the caller's transaction (an idempotent request's):
// what it writes commits or rolls back with tx.
func (s *Service) RefundTx(ctx context.Context, tx pgx.Tx, organizerID, orderID uuid.UUID, opts RefundOptions) (OrderState, error) {
	q := sqlcgen.New()
	row, err := q.OrderLockForOrganizer(ctx, tx, sqlcgen.OrderLockForOrganizerParams{ID: orderID, OrganizerID: organizerID})
	if errors.Is(err, db.ErrNotFound) {
		return OrderState{}, ErrOrderNotFound
	} else if err != nil {
		return OrderState{}, fmt.Errorf("lock order: %w", err)
	}
	o := newOrderTx(tx, row, Cause{})
	state := OrderState{ID: o.ID(), EventID: o.EventID(), Status: o.Status(), UpdatedAt: o.UpdatedAt()}
	if row.Channel != string(ChannelOnline) {
		return voidIssued(ctx, o, state, opts)
	}
	switch {
	case o.Status() == OrderRefunding || o.Status() == OrderRefunded:
		return state, nil
	case !o.Status().Paid():
		return OrderState{}, ErrOrderNotRefundable
	}
	if len(opts.TicketIDs) > 0 {
		whole, err := refundTickets(ctx, o, opts)
		if err != nil || !whole {
			return state, err
		}
	}
	payment, err := q.PaymentIntentGetByOrder(ctx, tx, o.ID())
	if err != nil {
		return OrderState{}, fmt.Errorf("get payment of %s order: %w", o.Status(), err)
	}
	if payment.PaymentIntentID == nil || *payment.PaymentIntentID == "" {
		return OrderState{}, fmt.Errorf("%s order %s has no payment intent", o.Status(), o.ID())
	}
	if err := giveUp(ctx, o, opts.Resell); err != nil {
		return OrderState{}, err
	}
	if err := o.Move(ctx, OrderRefunding); err != nil {
		return OrderState{}, err
	}
	if err := o.Emit(ctx, outbox.TypeRefundRequested, outbox.RefundRequested{
		OrderID: o.ID(), PaymentIntentID: *payment.PaymentIntentID, Reason: ReasonRefundByOrganizer,
	}); err != nil {
		return OrderState{}, err
	}
	state.Status, state.UpdatedAt = o.Status(), time.Now()
	return state, nil
}

// RefundOptions are the organizer's choices for a refund.
type RefundOptions struct {
	// Resell puts a ticketed order's seats back on sale; without it they
	// stay off sale.
	Resell bool
	// TicketIDs, when set, refunds only these tickets of the order (at
	// most MaxRefundTickets, distinct).
	TicketIDs []uuid.UUID
}

// MaxRefundTickets bounds the tickets one partial refund names.
const MaxRefundTickets = 100

// refundTickets refunds the selected tickets of the locked order o, in
// its transaction: their amount is the sum of their seats' prices, a
// refunds row records it (after every earlier refund of the order),
// RefundRequested with the refund's id and amount goes to the outbox, and
// the tickets are revoked (their seats back on sale with opts.Resell).
// Tickets already revoked by an earlier refund are skipped, so a retried
// request refunds nothing twice. It reports whole when the selection is
// every ticket the order has left: the caller then refunds the order as a
// whole.
func refundTickets(ctx context.Context, o *OrderTx, opts RefundOptions) (whole bool, err error) {
	if o.Status() != OrderTicketed {
		return false, ErrOrderNotRefundable
	}
	mine, err := o.q.TicketOfOrderExists(ctx, o.tx, sqlcgen.TicketOfOrderExistsParams{OrderID: o.ID(), Ids: opts.TicketIDs})
	if err != nil {
		return false, fmt.Errorf("look up tickets: %w", err)
	}
	if len(mine) != len(opts.TicketIDs) {
		return false, ErrTicketsNotInOrder
	}
	live, err := o.q.TicketLockForRefund(ctx, o.tx, sqlcgen.TicketLockForRefundParams{OrderID: o.ID(), Ids: opts.TicketIDs})
	if err != nil {
		return false, fmt.Errorf("lock tickets: %w", err)
	}
	if len(live) == 0 {
		return false, nil // refunded already: nothing to do
	}
	left, err := o.q.TicketCountLiveByOrder(ctx, o.tx, o.ID())
	if err != nil {
		return false, fmt.Errorf("count tickets: %w", err)
	}
	if int(left) == len(live) {
		return true, nil
	}
	ids := make([]uuid.UUID, len(live))
	var amount int64
	for i, t := range live {
		ids[i] = t.ID
		amount += t.PriceMinor
	}
	payment, err := o.q.PaymentIntentGetByOrder(ctx, o.tx, o.ID())
	if err != nil {
		return false, fmt.Errorf("get payment of ticketed order: %w", err)
	}
	if payment.PaymentIntentID == nil || *payment.PaymentIntentID == "" {
		return false, fmt.Errorf("ticketed order %s has no payment intent", o.ID())
	}
	if amount <= 0 {
		// Free seats: nothing to send to the provider.
		_, err := ledger.RevokeTickets(ctx, o.tx, o.ID(), ids, opts.Resell)
		return false, err
	}
	refund, err := o.q.RefundInsert(ctx, o.tx, sqlcgen.RefundInsertParams{
		ID: uuid.New(), OrderID: o.ID(), TicketIds: ids, AmountMinor: amount, Resell: opts.Resell,
	})
	if err != nil {
		return false, fmt.Errorf("record refund: %w", err)
	}
	if _, err := ledger.RevokeTickets(ctx, o.tx, o.ID(), ids, opts.Resell); err != nil {
		return false, fmt.Errorf("revoke tickets: %w", err)
	}
	return false, o.Emit(ctx, outbox.TypeRefundRequested, outbox.RefundRequested{
		OrderID: o.ID(), PaymentIntentID: *payment.PaymentIntentID, Reason: ReasonRefundByOrganizer,
		RefundID: refund.ID, AmountMinor: amount,
	})
}

// voidIssued is RefundTx for an order the organizer issued (a comp, or a
// box office sale paid outside the provider, and refunded outside it):
// nothing goes to the provider. In the refund's transaction the order
// gives up what it owns as a refunded one does (giveUp: its tickets are
// revoked, their seats back on sale with opts.Resell; a paid order's
// confirmed hold is released before its tickets are issued), becomes
// canceled, and OrderCanceled (ReasonVoidedByOrganizer) goes to the
// outbox: order.canceled to the organizer's webhooks, and a waitlist
// round for seats back on sale. Voiding a canceled order changes nothing
// and returns it; tickets of an issued order are voided all together
// (opts.TicketIDs is ErrOrderNotRefundable).
func voidIssued(ctx context.Context, o *OrderTx, state OrderState, opts RefundOptions) (OrderState, error) {
	switch {
	case o.Status() == OrderCanceled:
		return state, nil
	case !o.Status().Paid() || len(opts.TicketIDs) > 0:
		return OrderState{}, ErrOrderNotRefundable
	}
	if err := giveUp(ctx, o, opts.Resell); err != nil {
		return OrderState{}, err
	}
	if err := o.Move(ctx, OrderCanceled); err != nil {
		return OrderState{}, err
	}
	if err := o.Emit(ctx, outbox.TypeOrderCanceled, outbox.OrderCanceled{OrderID: o.ID(), Reason: ReasonVoidedByOrganizer}); err != nil {
		return OrderState{}, err
	}
	state.Status, state.UpdatedAt = o.Status(), time.Now()
	return state, nil
}

// giveUp revokes the tickets of a ticketed order (releasing their seats
// for resale when resell is set), or releases the confirmed hold of a
// paid one and puts its seats back on sale.
func giveUp(ctx context.Context, o *OrderTx, resell bool) error {
	if o.Status() == OrderTicketed {
		if _, err := ledger.RevokeOrder(ctx, o.tx, o.ID(), resell); err != nil {
			return fmt.Errorf("revoke tickets: %w", err)
		}
		return nil
	}
	if err := o.LockHold(ctx); err != nil {
		return err
	}
	if _, err := o.ReleaseSeats(ctx); err != nil {
		return err
	}
	if o.HoldStatus() != HoldActive && o.HoldStatus() != HoldConfirmed {
		return nil
	}
	return o.MoveHold(ctx, HoldReleased)
}

// RevokedTicket is a ticket a refund revoked.
type RevokedTicket struct {
	ID        uuid.UUID
	RevokedAt time.Time
}

// RevokedTickets lists the revoked tickets of an event for its organizer,
// oldest revocation first: the list door scanners check, since a revoked
// ticket's signed QR payload still verifies offline. It returns
// ErrEventNotFound when organizerID does not organize the event.
func (s *Service) RevokedTickets(ctx context.Context, organizerID, eventID uuid.UUID) ([]RevokedTicket, error) {
	if _, err := OrganizedEvent(ctx, s.pool, organizerID, eventID); err != nil {
		return nil, err
	}
	rows, err := sqlcgen.New().TicketListRevokedByEvent(ctx, s.read(), eventID)
	if err != nil {
		return nil, fmt.Errorf("list revoked tickets: %w", err)
	}
	out := make([]RevokedTicket, 0, len(rows))
	for _, r := range rows {
		out = append(out, RevokedTicket{ID: r.ID, RevokedAt: r.RevokedAt})
	}
	return out, nil
}
