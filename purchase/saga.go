package purchase

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"boxoffice/db"
	"boxoffice/outbox"
	"boxoffice/sqlcgen"
)

// Order statuses (DESIGN.md § States).
const (
	orderPendingPayment = "pending_payment"
	orderAuthorized     = "authorized" // reserved; no step writes it
	orderCapturePending = "capture_pending"
	orderPaid           = "paid"
	orderTicketed       = "ticketed"
	orderFailed         = "failed"
	orderCanceled       = "canceled"
	orderRefunding      = "refunding"
	orderRefunded       = "refunded"
)

// Hold statuses (DESIGN.md § States).
const (
	holdActive    = "active"
	holdConfirmed = "confirmed"
	holdExpired   = "expired"
	holdReleased  = "released"
)

// Reasons carried by the compensating commands the saga writes.
const (
	ReasonHoldExpired          = "hold_expired"
	ReasonOrderCanceled        = "order_canceled"
	ReasonOrderFailed          = "order_failed"
	ReasonPaymentFailed        = "payment_failed"
	ReasonCapturedAfterRelease = "captured_after_release"
)

// paymentCaptured is the provider's status of a captured PaymentIntent, as
// the payments row mirrors it.
const paymentCaptured = "succeeded"

// paymentAuthorized is the provider's status of an authorized, not yet
// captured PaymentIntent, as mirrored in payments.status.
const paymentAuthorized = "requires_capture"

// Errors of the saga steps. Any other error a step returns is transient
// too: the step may succeed when run again.
var (
	// ErrPermanent marks an event no retry can apply: its payload does
	// not decode, it names another order than its envelope, or its order
	// does not exist. The consumer dead-letters it (consumers.Permanent).
	// Messages wrapping it hold no payload bytes and no secrets.
	ErrPermanent = errors.New("event cannot be applied")
	// ErrTooEarly marks an event that arrived before the state it applies
	// to (JetStream does not order events): a PaymentCaptured while the
	// order still awaits its authorization, say. Nothing was written; the
	// consumer retries it later with backoff.
	ErrTooEarly = errors.New("event arrived before the state it applies to")
)

// SagaConfig configures NewSaga.
type SagaConfig struct {
	// Logger receives one line per decision, each with correlation_id,
	// causation_id, order_id and event_id. Defaults to discarding logs.
	Logger *slog.Logger
	// NowFunc stamps the occurred_at of the events the saga writes. State
	// checks never use it: expiry is judged by the database clock.
	// Defaults to time.Now.
	NowFunc func() time.Time
}

// Saga owns the legal transitions of the purchase saga (docs/saga.md, the
// purchase_saga rows). Each method is one step: it runs inside the
// caller's transaction (the consumer's, which also records the inbox row),
// locks the order row and then its hold, checks the state it expects,
// writes the new state and the next events to the outbox with the
// incoming event's correlation_id and its event_id as causation_id.
//
// A step is correct under redelivery and reordering: a stale or duplicate
// event changes nothing and returns nil; an event that came too early
// returns an error wrapping ErrTooEarly and writes nothing. An error
// wrapping ErrPermanent means no retry can apply the event. On any error
// the caller must roll tx back.
//
// Locks are always taken in the order order row → hold row → seat rows →
// hold_seats rows, the order the hold path (seats → hold_seats) and the
// expiry worker (order and hold without waiting, then seats) agree with,
// so saga steps, holds and expiry never deadlock one another.
type Saga struct {
	logger  *slog.Logger
	nowFunc func() time.Time
}

// NewSaga returns the saga cfg describes.
func NewSaga(cfg SagaConfig) *Saga {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	return &Saga{
		logger:  cfg.Logger.With("component", "purchase_saga"),
		nowFunc: cfg.NowFunc,
	}
}

// PaymentIntentCreated compensates an intent created for an order that was
// released meanwhile (failed or canceled): it writes
// AuthorizationCancelRequested, unless one was written for the order
// already. For an order still awaiting payment, or already past
// authorization, it does nothing.
func (s *Saga) PaymentIntentCreated(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
	p, err := decode[outbox.PaymentIntentCreated](ev)
	if err != nil {
		return err
	}
	st, err := s.begin(ctx, tx, ev, p.OrderID)
	if err != nil {
		return err
	}
	st.log = st.log.With("payment_intent_id", p.PaymentIntentID)
	switch st.order.Status {
	case orderFailed, orderCanceled:
		return st.requestCancel(ctx, p.PaymentIntentID, st.releaseReason())
	default:
		st.log.DebugContext(ctx, "payment intent noted; nothing to do", "order_status", st.order.Status)
		return nil
	}
}

// PaymentAuthorized confirms the hold and asks for the capture, or
// compensates:
//
//   - order pending_payment and its hold still owning its seats by the
//     database clock (active, before expires_at, none reclaimed): hold
//     confirmed, order capture_pending, OrderConfirmed + CaptureRequested;
//   - order pending_payment but the hold past its expiry (or its seats
//     reclaimed by a newer hold): the hold expires here as the expiry
//     worker would expire it — seats released, hold expired, order
//     failed, HoldExpired — and AuthorizationCancelRequested;
//   - order capture_pending, paid, ticketed, refunding or refunded: a
//     duplicate, nothing;
//   - anything else (failed, canceled): AuthorizationCancelRequested,
//     unless one was written for the order already.
//
// The seats are locked before the check, so no hold can reclaim them
// between the check and the commit.
func (s *Saga) PaymentAuthorized(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
	p, err := decode[outbox.PaymentAuthorized](ev)
	if err != nil {
		return err
	}
	st, err := s.begin(ctx, tx, ev, p.OrderID)
	if err != nil {
		return err
	}
	st.log = st.log.With("payment_intent_id", p.PaymentIntentID)
	switch st.order.Status {
	case orderCapturePending, orderPaid, orderTicketed, orderRefunding, orderRefunded:
		st.log.InfoContext(ctx, "authorization already applied; duplicate ignored", "order_status", st.order.Status)
		return nil
	case orderPendingPayment:
	default:
		return st.requestCancel(ctx, p.PaymentIntentID, st.releaseReason())
	}

	if st.hold.Status != holdActive {
		// Unreachable while every path that releases a hold also moves
		// its order on; fail the order rather than leave it stranded.
		st.log.ErrorContext(ctx, "order awaits payment but its hold is not active; failing it",
			"hold_id", st.hold.ID, "hold_status", st.hold.Status)
		if err := st.setOrder(ctx, orderFailed); err != nil {
			return err
		}
		return st.requestCancel(ctx, p.PaymentIntentID, st.releaseReason())
	}
	q := sqlcgen.New()
	if _, err := q.HoldSeatLockSeats(ctx, tx, []uuid.UUID{st.hold.ID}); err != nil {
		return fmt.Errorf("lock seats of hold: %w", err)
	}
	owns, err := q.HoldOwnsSeats(ctx, tx, st.hold.ID)
	if err != nil {
		return fmt.Errorf("check hold: %w", err)
	}
	if !owns {
		st.log.InfoContext(ctx, "authorization arrived after the hold expired; canceling it", "hold_id", st.hold.ID)
		if err := st.expireHold(ctx); err != nil {
			return err
		}
		return st.requestCancel(ctx, p.PaymentIntentID, ReasonHoldExpired)
	}

	// The payments row records the authorization before the order is
	// confirmed on it, so that a confirmed order always shows an
	// authorized payment (boxoffice audit checks it).
	if n, err := q.PaymentSetStatus(ctx, tx, sqlcgen.PaymentSetStatusParams{
		Status: paymentAuthorized, OrderID: st.order.ID, PaymentIntentID: p.PaymentIntentID,
	}); err != nil {
		return fmt.Errorf("record authorization: %w", err)
	} else if n == 0 {
		st.log.InfoContext(ctx, "authorization arrived before the order's payment row for this intent; retrying later")
		return fmt.Errorf("PaymentAuthorized for order %s without its payment row: %w", st.order.ID, ErrTooEarly)
	}
	if err := st.setHold(ctx, holdConfirmed); err != nil {
		return err
	}
	if err := st.setOrder(ctx, orderCapturePending); err != nil {
		return err
	}
	if err := st.emit(ctx, outbox.TypeOrderConfirmed, outbox.OrderConfirmed{OrderID: st.order.ID, HoldID: st.hold.ID}); err != nil {
		return err
	}
	if err := st.emit(ctx, outbox.TypeCaptureRequested, outbox.CaptureRequested{OrderID: st.order.ID, PaymentIntentID: p.PaymentIntentID}); err != nil {
		return err
	}
	st.log.InfoContext(ctx, "hold confirmed; capture requested", "hold_id", st.hold.ID)
	return nil
}

// PaymentCaptured completes the payment or refunds it:
//
//   - order capture_pending: order paid, TicketIssueRequested with the
//     hold's seats;
//   - order pending_payment (or the reserved authorized): too early, the
//     authorization has not been applied yet — ErrTooEarly;
//   - order failed or canceled: money was collected for an order that no
//     longer owns its seats. An incident is logged at Error level, the
//     order becomes refunding and one RefundRequested is written;
//   - order paid, ticketed, refunding or refunded: a duplicate, nothing.
func (s *Saga) PaymentCaptured(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
	p, err := decode[outbox.PaymentCaptured](ev)
	if err != nil {
		return err
	}
	st, err := s.begin(ctx, tx, ev, p.OrderID)
	if err != nil {
		return err
	}
	st.log = st.log.With("payment_intent_id", p.PaymentIntentID)
	switch st.order.Status {
	case orderPendingPayment, orderAuthorized:
		st.log.InfoContext(ctx, "capture arrived before the authorization was applied; retrying later", "order_status", st.order.Status)
		return fmt.Errorf("PaymentCaptured for order %s in %s: %w", st.order.ID, st.order.Status, ErrTooEarly)
	case orderCapturePending:
		seats, err := sqlcgen.New().HoldSeatListByHold(ctx, tx, st.hold.ID)
		if err != nil {
			return fmt.Errorf("list seats of hold: %w", err)
		}
		if _, err := sqlcgen.New().PaymentSetStatus(ctx, tx, sqlcgen.PaymentSetStatusParams{
			Status: paymentCaptured, OrderID: st.order.ID, PaymentIntentID: p.PaymentIntentID,
		}); err != nil {
			return fmt.Errorf("record capture: %w", err)
		}
		if err := st.setOrder(ctx, orderPaid); err != nil {
			return err
		}
		if err := st.emit(ctx, outbox.TypeTicketIssueRequested, outbox.TicketIssueRequested{
			OrderID: st.order.ID, HoldID: st.hold.ID, SeatIDs: seats,
		}); err != nil {
			return err
		}
		st.log.InfoContext(ctx, "payment captured; tickets requested", "amount_received", p.AmountReceived)
		return nil
	case orderFailed, orderCanceled:
		st.log.ErrorContext(ctx, "incident: payment captured after the order was released; refunding",
			"incident", ReasonCapturedAfterRelease, "order_status", st.order.Status,
			"hold_status", st.hold.Status, "amount_received", p.AmountReceived)
		if err := st.setOrder(ctx, orderRefunding); err != nil {
			return err
		}
		return st.emit(ctx, outbox.TypeRefundRequested, outbox.RefundRequested{
			OrderID: st.order.ID, PaymentIntentID: p.PaymentIntentID, Reason: ReasonCapturedAfterRelease,
		})
	default:
		st.log.InfoContext(ctx, "capture already applied; duplicate ignored", "order_status", st.order.Status)
		return nil
	}
}

// PaymentFailed fails an order still awaiting payment or capture: order
// failed, hold released, seats released, and AuthorizationCancelRequested
// unless the intent was captured (or a cancel was requested already). For
// an order in any other state it does nothing.
func (s *Saga) PaymentFailed(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
	p, err := decode[outbox.PaymentFailed](ev)
	if err != nil {
		return err
	}
	st, err := s.begin(ctx, tx, ev, p.OrderID)
	if err != nil {
		return err
	}
	st.log = st.log.With("payment_intent_id", p.PaymentIntentID, "code", p.Code)
	if st.order.Status != orderPendingPayment && st.order.Status != orderCapturePending {
		st.log.InfoContext(ctx, "payment failure for an order past payment; ignored", "order_status", st.order.Status)
		return nil
	}
	released, err := st.releaseSeats(ctx)
	if err != nil {
		return err
	}
	if st.hold.Status == holdActive || st.hold.Status == holdConfirmed {
		if err := st.setHold(ctx, holdReleased); err != nil {
			return err
		}
	}
	if err := st.setOrder(ctx, orderFailed); err != nil {
		return err
	}
	st.log.InfoContext(ctx, "payment failed; order failed and seats released", "seats_released", released)

	payment, err := sqlcgen.New().PaymentIntentGetByOrder(ctx, tx, st.order.ID)
	switch err = db.Interpret(err); {
	case err == nil && payment.Status == paymentCaptured:
		st.log.WarnContext(ctx, "payment failed after its intent was captured; not canceling it")
		return nil
	case err != nil && !errors.Is(err, db.ErrNotFound):
		return fmt.Errorf("read payment: %w", err)
	}
	return st.requestCancel(ctx, p.PaymentIntentID, ReasonPaymentFailed)
}

// PaymentRefunded completes a refund: order refunding → refunded. A
// refund of an order in any other state changes nothing; one of a paid or
// ticketed order was made outside Boxoffice and is logged as a warning.
func (s *Saga) PaymentRefunded(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
	p, err := decode[outbox.PaymentRefunded](ev)
	if err != nil {
		return err
	}
	st, err := s.begin(ctx, tx, ev, p.OrderID)
	if err != nil {
		return err
	}
	st.log = st.log.With("payment_intent_id", p.PaymentIntentID)
	switch st.order.Status {
	case orderRefunding:
		if err := st.setOrder(ctx, orderRefunded); err != nil {
			return err
		}
		st.log.InfoContext(ctx, "order refunded", "amount_refunded", p.AmountRefunded)
		return nil
	case orderPaid, orderTicketed:
		st.log.WarnContext(ctx, "refund of an order nobody asked to refund; made outside Boxoffice?",
			"order_status", st.order.Status, "amount_refunded", p.AmountRefunded)
		return nil
	default:
		st.log.InfoContext(ctx, "refund already applied or not ours; ignored", "order_status", st.order.Status)
		return nil
	}
}

// AuthorizationCanceled records that the provider canceled the order's
// intent: the payments row's status becomes canceled. A payments row not
// written yet is ErrTooEarly; a row naming another intent, or already
// canceled, is left alone.
func (s *Saga) AuthorizationCanceled(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
	p, err := decode[outbox.AuthorizationCanceled](ev)
	if err != nil {
		return err
	}
	st, err := s.begin(ctx, tx, ev, p.OrderID)
	if err != nil {
		return err
	}
	st.log = st.log.With("payment_intent_id", p.PaymentIntentID)
	q := sqlcgen.New()
	payment, err := q.PaymentIntentGetByOrder(ctx, tx, st.order.ID)
	switch err = db.Interpret(err); {
	case errors.Is(err, db.ErrNotFound) || err == nil && payment.PaymentIntentID == nil:
		st.log.InfoContext(ctx, "cancellation arrived before the payment row; retrying later")
		return fmt.Errorf("AuthorizationCanceled for order %s without a payment row: %w", st.order.ID, ErrTooEarly)
	case err != nil:
		return fmt.Errorf("read payment: %w", err)
	case *payment.PaymentIntentID != p.PaymentIntentID:
		st.log.WarnContext(ctx, "cancellation of an intent that is not the order's; ignored")
		return nil
	case payment.Status == "canceled":
		st.log.InfoContext(ctx, "cancellation already recorded; duplicate ignored")
		return nil
	}
	if _, err := q.PaymentSetStatus(ctx, tx, sqlcgen.PaymentSetStatusParams{
		Status: "canceled", OrderID: st.order.ID, PaymentIntentID: p.PaymentIntentID,
	}); err != nil {
		return fmt.Errorf("mark payment canceled: %w", err)
	}
	st.log.InfoContext(ctx, "authorization canceled", "order_status", st.order.Status)
	return nil
}

// step is one saga step in progress: the incoming event, its transaction
// and the locked order and hold.
type step struct {
	saga  *Saga
	tx    pgx.Tx
	ev    outbox.Envelope
	log   *slog.Logger
	order sqlcgen.Order
	hold  sqlcgen.Hold
}

// begin checks that the payload names the envelope's order, then locks the
// order and its hold, in that order.
func (s *Saga) begin(ctx context.Context, tx pgx.Tx, ev outbox.Envelope, payloadOrderID uuid.UUID) (*step, error) {
	st := &step{
		saga: s, tx: tx, ev: ev,
		log: s.logger.With("event_id", ev.EventID, "event_type", ev.EventType, "order_id", ev.AggregateID,
			"correlation_id", ev.CorrelationID, "causation_id", ev.CausationID),
	}
	if payloadOrderID != uuid.Nil && payloadOrderID != ev.AggregateID {
		return nil, fmt.Errorf("%w: %s payload names order %s, its envelope %s", ErrPermanent, ev.EventType, payloadOrderID, ev.AggregateID)
	}
	q := sqlcgen.New()
	var err error
	st.order, err = q.OrderGetForUpdate(ctx, tx, ev.AggregateID)
	if err = db.Interpret(err); errors.Is(err, db.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s names unknown order %s", ErrPermanent, ev.EventType, ev.AggregateID)
	} else if err != nil {
		return nil, fmt.Errorf("lock order: %w", err)
	}
	st.hold, err = q.HoldGetByOrderForUpdate(ctx, tx, ev.AggregateID)
	if err = db.Interpret(err); errors.Is(err, db.ErrNotFound) {
		return nil, fmt.Errorf("%w: order %s has no hold", ErrPermanent, ev.AggregateID)
	} else if err != nil {
		return nil, fmt.Errorf("lock hold: %w", err)
	}
	return st, nil
}

// setOrder moves the locked order to status, bumping version and
// updated_at.
func (st *step) setOrder(ctx context.Context, status string) error {
	n, err := sqlcgen.New().OrderTransition(ctx, st.tx, sqlcgen.OrderTransitionParams{
		ID: st.order.ID, FromStatus: st.order.Status, ToStatus: status,
	})
	if err != nil {
		return fmt.Errorf("order %s → %s: %w", st.order.Status, status, err)
	}
	if n != 1 {
		// Unreachable under the row lock.
		return fmt.Errorf("order %s → %s: order changed under its lock", st.order.Status, status)
	}
	st.order.Status = status
	return nil
}

// setHold moves the locked hold to status.
func (st *step) setHold(ctx context.Context, status string) error {
	n, err := sqlcgen.New().HoldTransition(ctx, st.tx, sqlcgen.HoldTransitionParams{
		ID: st.hold.ID, FromStatuses: []string{st.hold.Status}, ToStatus: status,
	})
	if err != nil {
		return fmt.Errorf("hold %s → %s: %w", st.hold.Status, status, err)
	}
	if n != 1 {
		return fmt.Errorf("hold %s → %s: hold changed under its lock", st.hold.Status, status)
	}
	st.hold.Status = status
	return nil
}

// releaseSeats locks the seats the hold still owns, in seat id order, and
// releases them. Seats a newer hold reclaimed are not touched.
func (st *step) releaseSeats(ctx context.Context) (int64, error) {
	q := sqlcgen.New()
	ids := []uuid.UUID{st.hold.ID}
	if _, err := q.HoldSeatLockSeats(ctx, st.tx, ids); err != nil {
		return 0, fmt.Errorf("lock seats of hold: %w", err)
	}
	n, err := q.HoldSeatReleaseByHolds(ctx, st.tx, ids)
	if err != nil {
		return 0, fmt.Errorf("release seats of hold: %w", err)
	}
	return n, nil
}

// expireHold does for the locked, active, pending order's hold what the
// expiry worker does: seats released, hold expired, order failed,
// HoldExpired written.
func (st *step) expireHold(ctx context.Context) error {
	seats, err := sqlcgen.New().HoldSeatListByHold(ctx, st.tx, st.hold.ID)
	if err != nil {
		return fmt.Errorf("list seats of hold: %w", err)
	}
	if _, err := st.releaseSeats(ctx); err != nil {
		return err
	}
	if err := st.setHold(ctx, holdExpired); err != nil {
		return err
	}
	if err := st.setOrder(ctx, orderFailed); err != nil {
		return err
	}
	return st.emit(ctx, outbox.TypeHoldExpired, outbox.HoldExpired{OrderID: st.order.ID, HoldID: st.hold.ID, SeatIDs: seats})
}

// requestCancel writes AuthorizationCancelRequested for the order's
// intent (intentID, or the payments row's when empty) unless one was
// written for the order already, by this step's kind or by the expiry
// worker. With no intent known there is nothing to cancel.
func (st *step) requestCancel(ctx context.Context, intentID, reason string) error {
	q := sqlcgen.New()
	if intentID == "" {
		payment, err := q.PaymentIntentGetByOrder(ctx, st.tx, st.order.ID)
		switch err = db.Interpret(err); {
		case errors.Is(err, db.ErrNotFound):
		case err != nil:
			return fmt.Errorf("read payment: %w", err)
		case payment.PaymentIntentID != nil:
			intentID = *payment.PaymentIntentID
		}
	}
	if intentID == "" {
		st.log.InfoContext(ctx, "no payment intent to cancel", "order_status", st.order.Status)
		return nil
	}
	n, err := q.OrderMarkAuthorizationCancelRequested(ctx, st.tx, st.order.ID)
	if err != nil {
		return fmt.Errorf("stamp cancel request: %w", err)
	}
	if n == 0 {
		st.log.InfoContext(ctx, "authorization cancel already requested; not requesting again", "order_status", st.order.Status)
		return nil
	}
	if err := st.emit(ctx, outbox.TypeAuthorizationCancelRequested, outbox.AuthorizationCancelRequested{
		OrderID: st.order.ID, PaymentIntentID: intentID, Reason: reason,
	}); err != nil {
		return err
	}
	st.log.InfoContext(ctx, "authorization cancel requested", "reason", reason, "order_status", st.order.Status)
	return nil
}

// releaseReason says why the locked order no longer wants its payment.
func (st *step) releaseReason() string {
	switch {
	case st.hold.Status == holdExpired:
		return ReasonHoldExpired
	case st.order.Status == orderCanceled:
		return ReasonOrderCanceled
	default:
		return ReasonOrderFailed
	}
}

// emit writes the next event to the outbox, caused by the incoming one and
// in its correlation.
func (st *step) emit(ctx context.Context, eventType string, payload any) error {
	env, raw, err := outbox.NewOrderEvent(eventType, st.order.ID, st.saga.nowFunc(),
		cmp.Or(st.ev.CorrelationID, st.order.CorrelationID), st.ev.EventID.String(), payload)
	if err != nil {
		return err
	}
	if err := outbox.Insert(ctx, st.tx, env, raw); err != nil {
		return err
	}
	st.log.DebugContext(ctx, "event written", "emitted_event_type", eventType, "emitted_event_id", env.EventID)
	return nil
}

// decode decodes an event's payload. Its errors wrap ErrPermanent and
// never quote the payload.
func decode[T any](ev outbox.Envelope) (T, error) {
	var p T
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return p, fmt.Errorf("%w: %s payload field %s has the wrong type", ErrPermanent, ev.EventType, typeErr.Field)
		}
		return p, fmt.Errorf("%w: %s payload does not decode", ErrPermanent, ev.EventType)
	}
	return p, nil
}
