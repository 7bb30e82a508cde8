package purchase

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/platform/db"
	"boxoffice/platform/outbox"
	"boxoffice/platform/sliceutil"
	"boxoffice/sqlcgen"
)

// Cause is what a write to an order comes from: the events it writes
// carry CorrelationID (the order's own when empty) and CausationID (the
// incoming event's id; empty for a request).
type Cause struct {
	CorrelationID string
	CausationID   string
	// Now stamps the occurred_at of the events written. Defaults to
	// time.Now. State checks never use it: expiry is judged by the
	// database clock.
	Now func() time.Time
	// Logger receives the debug line of each event written. Defaults to
	// discarding.
	Logger *slog.Logger
}

// OrderTx is one order locked in a transaction, and the only way its state
// is written: every writer of an order (the saga's steps, the buyer's
// cancel, the organizer's refund, ticket issuance) locks it through
// LockOrder (or a lock that checks its owner), checks the status it
// expects, moves it along Transitions, releases its hold's seats and
// writes its next events here. The expiry worker makes the same moves for
// a batch of holds at once through ExpiredHolds, its set-based form.
//
// Locks are always taken in the order order row → hold row → seat rows →
// hold_seats rows, the order the hold path (seats → hold_seats) and the
// expiry worker (order and hold without waiting, then seats) agree with,
// so no two writers deadlock. An OrderTx is used by one goroutine, inside
// the transaction it was locked in; on any error the caller rolls back.
type OrderTx struct {
	tx          pgx.Tx
	q           *sqlcgen.Queries
	order       sqlcgen.Order
	hold        *sqlcgen.Hold
	seats       []uuid.UUID // the hold's, once read
	seatsLocked bool
	cause       Cause
}

// LockOrder locks order id for the rest of tx. An unknown order is
// ErrOrderNotFound.
func LockOrder(ctx context.Context, tx pgx.Tx, id uuid.UUID, cause Cause) (*OrderTx, error) {
	tx = db.InterpretingTx(tx)
	row, err := sqlcgen.New().OrderGetForUpdate(ctx, tx, id)
	if errors.Is(err, db.ErrNotFound) {
		return nil, ErrOrderNotFound
	} else if err != nil {
		return nil, fmt.Errorf("lock order: %w", err)
	}
	return newOrderTx(tx, row, cause), nil
}

// LockOrderWithHold is LockOrder and then LockHold, in one statement.
func LockOrderWithHold(ctx context.Context, tx pgx.Tx, id uuid.UUID, cause Cause) (*OrderTx, error) {
	tx = db.InterpretingTx(tx)
	row, err := sqlcgen.New().OrderHoldGetForUpdate(ctx, tx, id)
	if errors.Is(err, db.ErrNotFound) {
		// No order, or an order without its hold: say which.
		o, err := LockOrder(ctx, tx, id, cause)
		if err != nil {
			return nil, err
		}
		return o, o.LockHold(ctx)
	} else if err != nil {
		return nil, fmt.Errorf("lock order and hold: %w", err)
	}
	o := newOrderTx(tx, row.Order, cause)
	o.hold = &row.Hold
	o.seats = row.SeatIds
	return o, nil
}

func newOrderTx(tx pgx.Tx, row sqlcgen.Order, cause Cause) *OrderTx {
	if cause.Now == nil {
		cause.Now = time.Now
	}
	cause.Logger = cmp.Or(cause.Logger, slog.New(slog.DiscardHandler))
	return &OrderTx{tx: db.InterpretingTx(tx), q: sqlcgen.New(), order: row, cause: cause}
}

// ID is the order's id.
func (o *OrderTx) ID() uuid.UUID { return o.order.ID }

// AmountMinor is the order's amount, in minor units of its currency.
func (o *OrderTx) AmountMinor() int64 { return o.order.AmountMinor }

// EventID is the id of the order's event (the show, not a domain event).
func (o *OrderTx) EventID() uuid.UUID { return o.order.EventID }

// Status is the order's status as locked, or as last moved.
func (o *OrderTx) Status() OrderStatus { return OrderStatus(o.order.Status) }

// UpdatedAt is when the order row last changed before it was locked.
func (o *OrderTx) UpdatedAt() time.Time { return o.order.UpdatedAt }

// CorrelationID is the id of the order's buyer journey.
func (o *OrderTx) CorrelationID() string { return cmp.Or(o.cause.CorrelationID, o.order.CorrelationID) }

// LockHold locks the order's hold. An order without one is ErrPermanent:
// every order is created with its hold.
func (o *OrderTx) LockHold(ctx context.Context) error {
	if o.hold != nil {
		return nil
	}
	hold, err := o.q.HoldGetByOrderForUpdate(ctx, o.tx, o.order.ID)
	if errors.Is(err, db.ErrNotFound) {
		return fmt.Errorf("%w: order %s has no hold", ErrPermanent, o.order.ID)
	} else if err != nil {
		return fmt.Errorf("lock hold: %w", err)
	}
	o.hold = &hold
	return nil
}

// HoldID is the locked hold's id (LockHold first).
func (o *OrderTx) HoldID() uuid.UUID { return o.hold.ID }

// HoldStatus is the locked hold's status (LockHold first).
func (o *OrderTx) HoldStatus() HoldStatus { return HoldStatus(o.hold.Status) }

// Move moves the order to status to. A move that is not in Transitions is
// refused: it is a bug in the step that asked for it.
func (o *OrderTx) Move(ctx context.Context, to OrderStatus) error {
	from := o.Status()
	if !CanMove(from, to) {
		return fmt.Errorf("order %s: %s → %s is not a move of the order lifecycle", o.order.ID, from, to)
	}
	// Under the row lock the move cannot miss; it goes with the next
	// statement or the commit, and the server fails that if it does.
	if err := o.q.OrderTransition(ctx, db.Deferring(o.tx), sqlcgen.OrderTransitionParams{
		ID: o.order.ID, FromStatus: string(from), ToStatus: string(to),
	}); err != nil {
		return fmt.Errorf("order %s → %s: %w", from, to, err)
	}
	o.order.Status = string(to)
	return nil
}

// MoveHold moves the locked hold to status to, along HoldTransitions.
func (o *OrderTx) MoveHold(ctx context.Context, to HoldStatus) error {
	from := o.HoldStatus()
	if !CanMoveHold(from, to) {
		return fmt.Errorf("hold %s: %s → %s is not a move of the hold lifecycle", o.hold.ID, from, to)
	}
	if err := o.q.HoldTransition(ctx, db.Deferring(o.tx), sqlcgen.HoldTransitionParams{
		ID: o.hold.ID, FromStatuses: []string{string(from)}, ToStatus: string(to),
	}); err != nil {
		return fmt.Errorf("hold %s → %s: %w", from, to, err)
	}
	o.hold.Status = string(to)
	return nil
}

// Seats lists the seats of the locked hold, as it was made.
// A hold's seats never change once it is made, so they are read once
// (with the lock, by LockOrderWithHold).
func (o *OrderTx) Seats(ctx context.Context) ([]uuid.UUID, error) {
	if o.seats == nil {
		seats, err := o.q.HoldSeatListByHold(ctx, o.tx, o.hold.ID)
		if err != nil {
			return nil, fmt.Errorf("list seats of hold: %w", err)
		}
		o.seats = seats
	}
	return slices.Clone(o.seats), nil
}

// LockSeats locks the seat rows the locked hold still owns, in seat id
// order, so that no hold can take them until the commit. The lock goes to
// the server with the transaction's next statement (db.Deferring), ahead
// of it: whatever that statement reads or writes, it does under the
// locks, at no round trip of the lock's own; a failure to lock (a
// deadlock, a timeout) fails that statement.
func (o *OrderTx) LockSeats(ctx context.Context) error {
	if o.seatsLocked {
		return nil
	}
	if err := o.q.HoldSeatLockSeats(ctx, db.Deferring(o.tx), []uuid.UUID{o.hold.ID}); err != nil {
		return fmt.Errorf("lock seats of hold: %w", err)
	}
	o.seatsLocked = true
	return nil
}

// ReleaseSeats locks the seats the hold still owns and gives them back:
// on sale again, or owned by the tickets issued for them. Seats a newer
// hold reclaimed are not touched. It returns how many it released.
func (o *OrderTx) ReleaseSeats(ctx context.Context) (int64, error) {
	if err := o.LockSeats(ctx); err != nil {
		return 0, err
	}
	n, err := o.q.HoldSeatReleaseByHolds(ctx, o.tx, []uuid.UUID{o.hold.ID})
	if err != nil {
		return 0, fmt.Errorf("release seats of hold: %w", err)
	}
	return n, nil
}

// ReleaseSeatsWithCommit is ReleaseSeats for a caller that does not need
// the count: the seats are locked now, and the release goes with the
// transaction's next statement or its commit (db.Deferring).
func (o *OrderTx) ReleaseSeatsWithCommit(ctx context.Context) error {
	if err := o.LockSeats(ctx); err != nil {
		return err
	}
	if _, err := o.q.HoldSeatReleaseByHolds(ctx, db.Deferring(o.tx), []uuid.UUID{o.hold.ID}); err != nil {
		return fmt.Errorf("release seats of hold: %w", err)
	}
	return nil
}

// RecordDecline counts a declined payment attempt of the order and keeps
// its code for the buyer (Order.LastDecline). It returns the declines so
// far and how many attempts the event allows (its onsale setting, or
// DefaultPaymentAttempts); the order's status is the caller's to move.
func (o *OrderTx) RecordDecline(ctx context.Context, code string) (declines, allowed int, err error) {
	d, err := o.q.OrderRecordDecline(ctx, o.tx, sqlcgen.OrderRecordDeclineParams{ID: o.order.ID, Code: code})
	if err != nil {
		return 0, 0, fmt.Errorf("record decline: %w", err)
	}
	return int(d.PaymentDeclines), attemptsAllowed(d.PaymentAttempts), nil
}

// Emit writes the order's next event to the outbox, in the order's
// correlation and caused by the Cause.
func (o *OrderTx) Emit(ctx context.Context, eventType string, payload any) error {
	_, err := o.EmitApplied(ctx, eventType, payload, "")
	return err
}

// EmitApplied is Emit for an event whose effect on consumer appliedBy is
// applied in this transaction too (outbox.Envelope.AppliedBy): that
// consumer acks it without a second effect. It returns the event's id,
// the causation of what applying it writes (SetCausation).
func (o *OrderTx) EmitApplied(ctx context.Context, eventType string, payload any, appliedBy string) (uuid.UUID, error) {
	env, err := emit(ctx, o.tx, eventType, o.order.ID, o.cause.Now(), o.CorrelationID(), o.cause.CausationID, appliedBy, payload)
	if err != nil {
		return uuid.Nil, err
	}
	o.cause.Logger.DebugContext(ctx, "event written", "emitted_event_type", eventType, "emitted_event_id", env.EventID)
	return env.EventID, nil
}

// SetCausation makes the events written from now on caused by the event
// causationID: the effect of an event this transaction wrote and applies
// itself (EmitApplied) is caused by that event, as when its consumer
// applies it.
func (o *OrderTx) SetCausation(causationID string) { o.cause.CausationID = causationID }

// emit writes one event about order orderID to the outbox in tx: the one
// writer of order events for OrderTx and ExpiredHolds.
func emit(ctx context.Context, tx pgx.Tx, eventType string, orderID uuid.UUID, at time.Time, correlationID, causationID, appliedBy string, payload any) (outbox.Envelope, error) {
	env, raw, err := outbox.NewOrderEvent(eventType, orderID, at, correlationID, causationID, payload)
	if err != nil {
		return outbox.Envelope{}, err
	}
	if appliedBy != "" {
		env.AppliedBy = appliedBy
		if raw, err = json.Marshal(env); err != nil {
			return outbox.Envelope{}, fmt.Errorf("marshal %s envelope: %w", eventType, err)
		}
	}
	return env, outbox.Insert(ctx, tx, env, raw)
}

// RequestCancel writes AuthorizationCancelRequested for the order's
// intent (intentID, or the payments row's when empty) unless one was
// written for the order already, by any writer: one cancel request per
// order, whoever notices first (migrations/00005_saga.sql). With no
// intent known there is nothing to cancel. It reports whether it wrote
// one.
func (o *OrderTx) RequestCancel(ctx context.Context, intentID, reason string) (bool, error) {
	if intentID == "" {
		payment, err := o.q.PaymentIntentGetByOrder(ctx, o.tx, o.order.ID)
		switch {
		case errors.Is(err, db.ErrNotFound):
		case err != nil:
			return false, fmt.Errorf("read payment: %w", err)
		case payment.PaymentIntentID != nil:
			intentID = *payment.PaymentIntentID
		}
	}
	if intentID == "" {
		return false, nil
	}
	stamped, err := MarkCancelRequested(ctx, o.tx, o.order.ID)
	if err != nil {
		return false, fmt.Errorf("stamp cancel request: %w", err)
	}
	if !stamped {
		return false, nil
	}
	return true, o.Emit(ctx, outbox.TypeAuthorizationCancelRequested, outbox.AuthorizationCancelRequested{
		OrderID: o.order.ID, PaymentIntentID: intentID, Reason: reason,
	})
}

// MarkCancelRequested stamps, in tx, that AuthorizationCancelRequested is
// being written for order orderID, which the caller has locked there
// (OrderGetForUpdate, or an OrderTx). It reports false, stamping nothing,
// when one was written for the order already, by any writer: the caller
// must then not write another (one cancel request per order). It is the
// one statement that sets orders.authorization_cancel_requested_at, for
// OrderTx.RequestCancel and for the reconciler's cancel repair; the error
// is the database's, for the caller to wrap.
func MarkCancelRequested(ctx context.Context, tx pgx.Tx, orderID uuid.UUID) (bool, error) {
	n, err := sqlcgen.New().OrderMarkAuthorizationCancelRequested(ctx, tx, orderID)
	return n > 0, err
}

// ExpiredHolds is a batch of expired holds with their orders, claimed and
// locked in one transaction: the set-based form of OrderTx, for the expiry
// worker, which moves hundreds of orders at a time. Its moves are checked
// against the same Transitions and HoldTransitions, release seats with
// the same statements as OrderTx.ReleaseSeats, and its events are written
// the way OrderTx.Emit writes them; only the statements take many ids.
//
// Locks: the claim takes hold and order rows together without waiting
// (SKIP LOCKED), then ReleaseSeats locks the seats in seat id order, so
// the batch never waits on an OrderTx holding an order and never
// deadlocks with one.
type ExpiredHolds struct {
	tx      pgx.Tx
	q       *sqlcgen.Queries
	claimed []sqlcgen.HoldClaimExpiredRow
	holds   []uuid.UUID
	orders  []uuid.UUID
	now     func() time.Time
	// emitted is the HoldExpired event written per order: the cause of
	// the order's cancel request.
	emitted map[uuid.UUID]outbox.Envelope
}

// ClaimExpiredHolds claims up to limit active holds past their expires_at
// by the database clock, oldest first, with their orders, both locked
// for the rest of tx. Holds another transaction has locked are passed
// over, so concurrent claims take disjoint batches. now stamps the events
// written (default time.Now).
func ClaimExpiredHolds(ctx context.Context, tx pgx.Tx, limit int, now func() time.Time) (*ExpiredHolds, error) {
	tx = db.InterpretingTx(tx)
	q := sqlcgen.New()
	claimed, err := q.HoldClaimExpired(ctx, tx, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("claim expired holds: %w", err)
	}
	if now == nil {
		now = time.Now
	}
	b := &ExpiredHolds{tx: tx, q: q, claimed: claimed, now: now, emitted: make(map[uuid.UUID]outbox.Envelope, len(claimed))}
	for _, c := range claimed {
		b.holds = append(b.holds, c.ID)
		b.orders = append(b.orders, c.OrderID)
	}
	return b, nil
}

// Len is how many holds the batch claimed.
func (b *ExpiredHolds) Len() int { return len(b.claimed) }

// ExpiredHold is one hold ClaimExpiredHolds claimed.
type ExpiredHold struct {
	HoldID, OrderID uuid.UUID
	CorrelationID   string
	SeatIDs         []uuid.UUID
	// DelaySeconds is how long past its expires_at the hold was when
	// claimed, by the database clock.
	DelaySeconds float64
}

// Claimed are the claimed holds, oldest expiry first.
func (b *ExpiredHolds) Claimed() []ExpiredHold {
	return sliceutil.Map(b.claimed, func(c sqlcgen.HoldClaimExpiredRow) ExpiredHold {
		return ExpiredHold{HoldID: c.ID, OrderID: c.OrderID, CorrelationID: c.CorrelationID, SeatIDs: c.SeatIds, DelaySeconds: c.DelaySeconds}
	})
}

// ReleaseSeats locks the seats the holds still own, in seat id order, and
// puts them back on sale; seats a newer hold reclaimed stay with it. It
// returns how many it released.
func (b *ExpiredHolds) ReleaseSeats(ctx context.Context) (int64, error) {
	if err := b.q.HoldSeatLockSeats(ctx, b.tx, b.holds); err != nil {
		return 0, fmt.Errorf("lock seats of expired holds: %w", err)
	}
	n, err := b.q.HoldSeatReleaseByHolds(ctx, b.tx, b.holds)
	if err != nil {
		return 0, fmt.Errorf("release seats of expired holds: %w", err)
	}
	return n, nil
}

// MoveHolds moves every claimed hold from active (as claimed) to to,
// along HoldTransitions.
func (b *ExpiredHolds) MoveHolds(ctx context.Context, to HoldStatus) error {
	if !CanMoveHold(HoldActive, to) {
		return fmt.Errorf("holds: %s → %s is not a move of the hold lifecycle", HoldActive, to)
	}
	n, err := b.q.HoldTransitionMany(ctx, b.tx, sqlcgen.HoldTransitionManyParams{
		Ids: b.holds, FromStatus: string(HoldActive), ToStatus: string(to),
	})
	if err != nil {
		return fmt.Errorf("holds → %s: %w", to, err)
	}
	if n != int64(len(b.holds)) {
		// Unreachable: the claim locked them active.
		return fmt.Errorf("holds → %s: %d of %d claimed holds changed under their locks", to, int64(len(b.holds))-n, len(b.holds))
	}
	return nil
}

// MoveOrders moves the claimed holds' orders that are in from to to, along
// Transitions, and returns the ids of those it moved (the others are
// further along, or already final).
func (b *ExpiredHolds) MoveOrders(ctx context.Context, from, to OrderStatus) ([]uuid.UUID, error) {
	if !CanMove(from, to) {
		return nil, fmt.Errorf("orders: %s → %s is not a move of the order lifecycle", from, to)
	}
	moved, err := b.q.OrderTransitionMany(ctx, b.tx, sqlcgen.OrderTransitionManyParams{
		Ids: b.orders, FromStatus: string(from), ToStatus: string(to),
	})
	if err != nil {
		return nil, fmt.Errorf("orders %s → %s: %w", from, to, err)
	}
	return moved, nil
}

// EmitExpired writes HoldExpired for every claimed hold, in its order's
// correlation.
func (b *ExpiredHolds) EmitExpired(ctx context.Context) error {
	now := b.now()
	for _, c := range b.claimed {
		env, err := emit(ctx, b.tx, outbox.TypeHoldExpired, c.OrderID, now, c.CorrelationID, "", "",
			outbox.HoldExpired{OrderID: c.OrderID, HoldID: c.ID, SeatIDs: c.SeatIds})
		if err != nil {
			return err
		}
		b.emitted[c.OrderID] = env
	}
	return nil
}

// RequestCancels writes AuthorizationCancelRequested (with reason) for
// each of orders that has a PaymentIntent and no cancel request yet — one
// cancel request per order, whoever notices first, as
// OrderTx.RequestCancel — caused by the order's HoldExpired (EmitExpired
// first). It returns how many it wrote.
func (b *ExpiredHolds) RequestCancels(ctx context.Context, orders []uuid.UUID, reason string) (int, error) {
	cancels, err := b.q.OrderMarkAuthorizationCancelRequestedWithIntent(ctx, b.tx, orders)
	if err != nil {
		return 0, fmt.Errorf("stamp cancel requests: %w", err)
	}
	now := b.now()
	for _, c := range cancels {
		cause := b.emitted[c.ID]
		if _, err := emit(ctx, b.tx, outbox.TypeAuthorizationCancelRequested, c.ID, now, cause.CorrelationID, cause.EventID.String(), "",
			outbox.AuthorizationCancelRequested{OrderID: c.ID, PaymentIntentID: c.PaymentIntentID, Reason: reason}); err != nil {
			return 0, err
		}
	}
	return len(cancels), nil
}
