package tickets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/domain/purchase"
	"boxoffice/domain/tickets/ledger"
	"boxoffice/platform/fault"
	"boxoffice/platform/outbox"
	"boxoffice/platform/promreg"
	"boxoffice/sqlcgen"
)

// Errors returned by Issuer.Issue.
var (
	// ErrOrderNotPaid: the order has not reached paid yet (its capture is
	// still on the way). Transient: issuing again later can succeed.
	ErrOrderNotPaid = fault.New(fault.CodeConflict, "order not paid yet")
	// ErrOrderNotFound: no order has the id. No retry can fix it. It is
	// purchase's: one "order not found" in the tree.
	ErrOrderNotFound = purchase.ErrOrderNotFound
	// ErrSeatTicketed: a seat of the order already has a ticket of another
	// order. ticket_seat_live_uq kept the seat from being sold twice; the
	// purchase path should never have let it come this far, so this needs
	// a person, not a retry.
	ErrSeatTicketed = fault.New(fault.CodeConflict, "seat already ticketed to another order")
)

// IssuerConfig configures NewIssuer.
type IssuerConfig struct {
	// Signer signs each ticket's QR payload. Required.
	Signer *Signer
	// Logger receives the issuer's logs. Required.
	Logger *slog.Logger
	// Registerer receives boxoffice_ticket_seat_conflicts_total: orders
	// whose seat already had a live ticket of another order, which the
	// purchase path should never let happen (ticket_seat_live_uq stopped
	// the second ticket). Issue counts them, once per attempt; IssuePaid
	// does not, since the capture it fails falls back to the tickets
	// consumer, whose Issue meets the same conflict. Defaults to none.
	Registerer prometheus.Registerer
}

// Issuer issues the tickets of paid orders.
type Issuer struct {
	signer    *Signer
	logger    *slog.Logger
	now       func() time.Time
	conflicts prometheus.Counter
}

// NewIssuer returns an Issuer. It panics when cfg misses a required field,
// a programmer error.
func NewIssuer(cfg IssuerConfig) *Issuer {
	if cfg.Signer == nil || cfg.Logger == nil {
		panic("tickets: NewIssuer needs a Signer and a Logger")
	}
	return &Issuer{signer: cfg.Signer, logger: cfg.Logger.With("component", "tickets"), now: time.Now,
		conflicts: promreg.Counter(cfg.Registerer, "boxoffice_ticket_seat_conflicts_total",
			"Orders refused tickets because a seat already had a live ticket of another order.")}
}

// IssueParams names the order to issue tickets for and the event that
// asked, for tracing the events Issue writes.
type IssueParams struct {
	OrderID uuid.UUID
	// CorrelationID is the buyer journey's id, copied to TicketIssued.
	CorrelationID string
	// CausationID is the id of the event that asked, copied to
	// TicketIssued.
	CausationID string
}

// Issued says what Issue did.
type Issued struct {
	// TicketIDs are the order's ticket ids, one per seat in seat id order;
	// empty when nothing was issued.
	TicketIDs []uuid.UUID
	// Applied is true when this call ticketed the order, false when it
	// found the order ticketed already or in a state that gets no tickets.
	Applied bool
}

// Issue tickets the order in tx, which the caller commits. It locks the
// order row and then:
//
//   - paid: inserts one ticket per seat of the order's hold as the
//     database records it, not as the request lists them (id ID(order,
//     seat), IssuedAt now to the second, a signed QR payload), skipping
//     tickets that exist; releases the hold's seats, since the tickets own
//     them now; marks the order ticketed; writes TicketIssued to the
//     outbox. Applied is true.
//   - ticketed: nothing; a duplicate request. Returns the existing ticket
//     ids.
//   - pending_payment, authorized, capture_pending: returns
//     ErrOrderNotPaid, so the caller retries later.
//   - failed, canceled, refunding, refunded: nothing; the request is
//     stale (the order was refunded before its tickets were issued, say).
//
// Returns ErrOrderNotFound for an unknown order and ErrSeatTicketed when a
// seat is ticketed to another order; either way tx must be rolled back.
func (i *Issuer) Issue(ctx context.Context, tx pgx.Tx, p IssueParams) (Issued, error) {
	q := sqlcgen.New()
	o, err := purchase.LockOrderWithHold(ctx, tx, p.OrderID, purchase.Cause{
		CorrelationID: p.CorrelationID, CausationID: p.CausationID, Now: i.now,
	})
	if err != nil {
		return Issued{}, err
	}
	switch st := o.Status(); {
	case st == purchase.OrderPaid:
	case st == purchase.OrderTicketed:
		existing, err := q.TicketListByOrder(ctx, tx, o.ID())
		if err != nil {
			return Issued{}, fmt.Errorf("list tickets: %w", err)
		}
		ids := make([]uuid.UUID, 0, len(existing))
		for _, t := range existing {
			ids = append(ids, t.ID)
		}
		return Issued{TicketIDs: ids}, nil
	case st.BeforeAuthorization() || st == purchase.OrderCapturePending:
		return Issued{}, fmt.Errorf("order %s is %s: %w", o.ID(), st, ErrOrderNotPaid)
	default:
		i.logger.WarnContext(ctx, "ticket issue requested for an order that gets no tickets; ignored",
			"order_id", o.ID(), "order_status", st, "correlation_id", p.CorrelationID)
		return Issued{}, nil
	}
	ids, err := i.issuePaid(ctx, tx, o)
	if errors.Is(err, ErrSeatTicketed) {
		i.conflicts.Inc()
	}
	if err != nil {
		return Issued{}, err
	}
	return Issued{TicketIDs: ids, Applied: true}, nil
}

// IssuePaid implements purchase.TicketIssuer: what Issue does for a paid
// order, for the saga's PaymentCaptured step, which has just locked o
// with its hold and moved it to paid in tx, and written the
// TicketIssueRequested requestID applied by the tickets consumer.
// TicketIssued is caused by requestID, as when the consumer issues them.
//
// A seat ticketed to another order (ErrSeatTicketed), a hold without
// seats or an order not paid is returned wrapping
// purchase.ErrTicketsNotIssued: no retry issues those here, and the
// tickets consumer dead-letters them for a person. Any other error (the
// database, the request's context) is returned as it is, transient.
func (i *Issuer) IssuePaid(ctx context.Context, tx pgx.Tx, o *purchase.OrderTx, requestID uuid.UUID) error {
	if o.Status() != purchase.OrderPaid {
		return fmt.Errorf("%w: order %s is %s, not paid", purchase.ErrTicketsNotIssued, o.ID(), o.Status())
	}
	o.SetCausation(requestID.String())
	_, err := i.issuePaid(ctx, tx, o)
	if errors.Is(err, ErrSeatTicketed) || errors.Is(err, errNoSeats) {
		return fmt.Errorf("%w: %w", purchase.ErrTicketsNotIssued, err)
	}
	return err
}

// errNoSeats is a paid order whose hold lists no seats: no retry gives it
// any.
var errNoSeats = errors.New("the order's hold has no seats")

// Consumer implements purchase.TicketIssuer: the tickets consumer's
// durable name, which a request issued in place is written applied by.
func (i *Issuer) Consumer() string { return ConsumerName }

// ConsumerName is the durable name of the consumer that issues tickets
// for TicketIssueRequested (consumers.TicketsName).
const ConsumerName = "tickets"

// issuePaid tickets o, locked and paid, in tx: the tickets inserted, the
// hold's seats released to them, the order ticketed and TicketIssued
// written. It returns the ticket ids, one per seat in seat id order.
func (i *Issuer) issuePaid(ctx context.Context, tx pgx.Tx, o *purchase.OrderTx) ([]uuid.UUID, error) {
	q := sqlcgen.New()
	seatIDs, err := o.Seats(ctx)
	if err != nil {
		return nil, err
	}
	if len(seatIDs) == 0 {
		return nil, fmt.Errorf("order %s, hold %s: %w", o.ID(), o.HoldID(), errNoSeats)
	}
	slices.SortFunc(seatIDs, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	// The hold path checks a seat's tickets under the seat's lock: insert
	// the tickets and release the hold's seats under the same locks.
	if err := o.LockSeats(ctx); err != nil {
		return nil, err
	}

	issuedAt := i.now().UTC().Truncate(time.Second)
	params := ledger.IssueParams{OrderID: o.ID(), EventID: o.EventID(), IssuedAt: issuedAt}
	for _, seatID := range seatIDs {
		t := Ticket{ID: ID(o.ID(), seatID), OrderID: o.ID(), SeatID: seatID, EventID: o.EventID(), IssuedAt: issuedAt}
		params.IDs = append(params.IDs, t.ID)
		params.SeatIDs = append(params.SeatIDs, seatID)
		params.QRPayloads = append(params.QRPayloads, i.signer.Sign(t))
	}
	inserted, err := ledger.Issue(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("insert tickets: %w", err)
	}
	// ON CONFLICT DO NOTHING also skips a seat that is another order's:
	// make sure every seat ended up with this order's ticket (all were
	// inserted, or the ones that were not are this order's already).
	if len(inserted) != len(params.IDs) {
		existing, err := q.TicketListByOrder(ctx, tx, o.ID())
		if err != nil {
			return nil, fmt.Errorf("list tickets: %w", err)
		}
		have := make(map[uuid.UUID]bool, len(existing))
		for _, t := range existing {
			have[t.ID] = true
		}
		for _, id := range params.IDs {
			if !have[id] {
				return nil, fmt.Errorf("order %s: %w", o.ID(), ErrSeatTicketed)
			}
		}
	}

	// The tickets own the seats now.
	if err := o.ReleaseSeatsWithCommit(ctx); err != nil {
		return nil, err
	}
	if err := o.Move(ctx, purchase.OrderTicketed); err != nil {
		return nil, err
	}
	if err := o.Emit(ctx, outbox.TypeTicketIssued, outbox.TicketIssued{OrderID: o.ID(), TicketIDs: params.IDs}); err != nil {
		return nil, err
	}
	return params.IDs, nil
}
