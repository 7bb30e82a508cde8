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

	"boxoffice/domain/payments/record"
	"boxoffice/platform/db"
	"boxoffice/platform/fault"
	"boxoffice/platform/outbox"
	"boxoffice/platform/sliceutil"
	"boxoffice/sqlcgen"
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
	// does not exist. It is fault.ErrPermanent, so the consumer runtime
	// dead-letters it as it does any permanent error.
	// Messages wrapping it hold no payload bytes and no secrets.
	ErrPermanent = fault.ErrPermanent
	// ErrTooEarly marks an event that arrived before the state it applies
	// to (JetStream does not order events): a PaymentCaptured while the
	// order still awaits its authorization, say. Nothing was written; the
	// consumer retries it later with backoff.
	ErrTooEarly = fault.New(fault.CodeConflict, "event arrived before the state it applies to")
	// ErrTicketsNotIssued marks a PaymentCaptured whose tickets no retry
	// of its step can issue (SagaConfig.Tickets; a seat ticketed to
	// another order, say): nothing was written. A writer that applies the
	// capture where it arrives leaves it to the saga's consumer, whose
	// step requests the tickets from the tickets consumer, as without
	// SagaConfig.Tickets; that consumer dead-letters what it cannot issue.
	ErrTicketsNotIssued = errors.New("tickets not issued with the capture")
)

// TicketIssuer issues a paid order's tickets in the transaction that
// applies its capture (SagaConfig.Tickets). domain/tickets' Issuer is
// one; purchase names only what it needs, since tickets builds on it.
type TicketIssuer interface {
	// IssuePaid issues the tickets of o, locked with its hold and just
	// moved to paid in tx, as the tickets consumer issues them for the
	// TicketIssueRequested whose event id is requestID. An error wrapping
	// ErrTicketsNotIssued says no retry can issue them here; any other
	// error is transient (the caller rolls back and may retry).
	IssuePaid(ctx context.Context, tx pgx.Tx, o *OrderTx, requestID uuid.UUID) error
	// Consumer is the durable name of the consumer that issues tickets
	// otherwise; the request is written applied by it.
	Consumer() string
}

// SagaConfig configures NewSaga.
type SagaConfig struct {
	// Logger receives one line per decision, each with correlation_id,
	// causation_id, order_id and event_id. Defaults to discarding logs.
	Logger *slog.Logger
	// NowFunc stamps the occurred_at of the events the saga writes. State
	// checks never use it: expiry is judged by the database clock.
	// Defaults to time.Now.
	NowFunc func() time.Time
	// Tickets, when set, issues a paid order's tickets in PaymentCaptured's
	// step: TicketIssueRequested is written applied by the tickets
	// consumer, and the order is ticketed in the commit that marks it
	// paid, with no hop through the bus. Tickets that cannot be issued
	// there end the step with ErrTicketsNotIssued. Nil: the tickets
	// consumer issues them.
	Tickets TicketIssuer
}

// Saga applies the purchase saga's events (docs/saga.md, the
// purchase_saga rows) to their orders. Each method is one step: it runs inside the
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
// Every step locks its order through OrderTx, which also keeps the lock
// order that saga steps, holds and expiry agree on, and moves the order
// only along Transitions.
type Saga struct {
	logger  *slog.Logger
	nowFunc func() time.Time
	tickets TicketIssuer
}

// NewSaga returns the saga cfg describes.
func NewSaga(cfg SagaConfig) *Saga {
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	return &Saga{
		logger:  cfg.Logger.With("component", "purchase_saga"),
		nowFunc: cfg.NowFunc,
		tickets: cfg.Tickets,
	}
}

// PaymentIntentCreated compensates an intent created for an order that was
// released meanwhile (failed or canceled): it writes
// AuthorizationCancelRequested, unless one was written for the order
// already. For an order still awaiting payment, or already past
// authorization, it does nothing.
func (s *Saga) PaymentIntentCreated(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
	return run(ctx, s, tx, ev, nil, s.paymentIntentCreated)
}

func (s *Saga) paymentIntentCreated(ctx context.Context, st *step, p outbox.PaymentIntentCreated) error {
	switch st.Status() {
	case OrderFailed, OrderCanceled:
		return st.requestCancel(ctx, p.PaymentIntentID, st.releaseReason())
	default:
		st.log.DebugContext(ctx, "payment intent noted; nothing to do", "order_status", st.Status())
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
	return run(ctx, s, tx, ev, nil, s.paymentAuthorized)
}

func (s *Saga) paymentAuthorized(ctx context.Context, st *step, p outbox.PaymentAuthorized) error {
	tx := st.tx
	switch st.Status() {
	case OrderCapturePending, OrderPaid, OrderTicketed, OrderRefunding, OrderRefunded:
		st.log.InfoContext(ctx, "authorization already applied; duplicate ignored", "order_status", st.Status())
		return nil
	case OrderPendingPayment:
	default:
		return st.requestCancel(ctx, p.PaymentIntentID, st.releaseReason())
	}

	if st.HoldStatus() != HoldActive {
		// Unreachable while every path that releases a hold also moves
		// its order on; fail the order rather than leave it stranded.
		st.log.ErrorContext(ctx, "order awaits payment but its hold is not active; failing it",
			"hold_id", st.HoldID(), "hold_status", st.HoldStatus())
		if err := st.Move(ctx, OrderFailed); err != nil {
			return err
		}
		return st.requestCancel(ctx, p.PaymentIntentID, st.releaseReason())
	}
	if err := st.LockSeats(ctx); err != nil {
		return err
	}
	// Whether the hold still owns its seats, asked with the seats locked,
	// and whether the payment row of this intent is there yet.
	check, err := sqlcgen.New().HoldOwnsSeatsForPayment(ctx, tx, sqlcgen.HoldOwnsSeatsForPaymentParams{
		ID: st.HoldID(), PaymentIntentID: p.PaymentIntentID,
	})
	if err != nil {
		return fmt.Errorf("check hold: %w", err)
	}
	if !check.OwnsSeats {
		st.log.InfoContext(ctx, "authorization arrived after the hold expired; canceling it", "hold_id", st.HoldID())
		if err := st.expireHold(ctx); err != nil {
			return err
		}
		return st.requestCancel(ctx, p.PaymentIntentID, ReasonHoldExpired)
	}

	if !check.HasPayment {
		st.log.InfoContext(ctx, "authorization arrived before the order's payment row for this intent; retrying later")
		return fmt.Errorf("PaymentAuthorized for order %s without its payment row: %w", st.ID(), ErrTooEarly)
	}
	// The payments row records the authorization in the transaction that
	// confirms the order on it, so that a confirmed order always shows an
	// authorized payment (boxoffice audit checks it). The row is there
	// (payment rows are never deleted): the write goes with the commit.
	if _, err := record.Status(ctx, db.Deferring(tx), st.ID(), p.PaymentIntentID, paymentAuthorized); err != nil {
		return fmt.Errorf("record authorization: %w", err)
	}
	if err := st.MoveHold(ctx, HoldConfirmed); err != nil {
		return err
	}
	if err := st.Move(ctx, OrderCapturePending); err != nil {
		return err
	}
	if err := st.Emit(ctx, outbox.TypeOrderConfirmed, outbox.OrderConfirmed{OrderID: st.ID(), HoldID: st.HoldID()}); err != nil {
		return err
	}
	if err := st.Emit(ctx, outbox.TypeCaptureRequested, outbox.CaptureRequested{OrderID: st.ID(), PaymentIntentID: p.PaymentIntentID}); err != nil {
		return err
	}
	st.log.InfoContext(ctx, "hold confirmed; capture requested", "hold_id", st.HoldID())
	return nil
}

// PaymentCaptured completes the payment or refunds it:
//
//   - order capture_pending: order paid, TicketIssueRequested with the
//     hold's seats (with SagaConfig.Tickets: applied here, the order
//     ticketed);
//   - order pending_payment (or the reserved authorized): too early, the
//     authorization has not been applied yet — ErrTooEarly;
//   - order failed or canceled: money was collected for an order that no
//     longer owns its seats. An incident is logged at Error level, the
//     order becomes refunding and one RefundRequested is written;
//   - order paid, ticketed, refunding or refunded: a duplicate, nothing.
func (s *Saga) PaymentCaptured(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
	return run(ctx, s, tx, ev, nil, s.paymentCaptured)
}

func (s *Saga) paymentCaptured(ctx context.Context, st *step, p outbox.PaymentCaptured) error {
	tx := st.tx
	switch st.Status() {
	case OrderPendingPayment, OrderAuthorized:
		st.log.InfoContext(ctx, "capture arrived before the authorization was applied; retrying later", "order_status", st.Status())
		return fmt.Errorf("PaymentCaptured for order %s in %s: %w", st.ID(), st.Status(), ErrTooEarly)
	case OrderCapturePending:
		seats, err := st.Seats(ctx)
		if err != nil {
			return err
		}
		if _, err := record.Status(ctx, db.Deferring(tx), st.ID(), p.PaymentIntentID, paymentCaptured); err != nil {
			return fmt.Errorf("record capture: %w", err)
		}
		if err := st.Move(ctx, OrderPaid); err != nil {
			return err
		}
		req := outbox.TicketIssueRequested{OrderID: st.ID(), HoldID: st.HoldID(), SeatIDs: seats}
		if s.tickets == nil {
			if err := st.Emit(ctx, outbox.TypeTicketIssueRequested, req); err != nil {
				return err
			}
			st.log.InfoContext(ctx, "payment captured; tickets requested", "amount_received", p.AmountReceived)
			return nil
		}
		reqID, err := st.EmitApplied(ctx, outbox.TypeTicketIssueRequested, req, s.tickets.Consumer())
		if err != nil {
			return err
		}
		if err := s.tickets.IssuePaid(ctx, tx, st.OrderTx, reqID); err != nil {
			if errors.Is(err, ErrTicketsNotIssued) {
				st.log.WarnContext(ctx, "tickets cannot be issued with the capture; leaving it to the saga's consumer", "error", err.Error())
			}
			return err
		}
		st.log.InfoContext(ctx, "payment captured; tickets issued", "amount_received", p.AmountReceived)
		return nil
	case OrderFailed, OrderCanceled:
		st.log.ErrorContext(ctx, "incident: payment captured after the order was released; refunding",
			"incident", ReasonCapturedAfterRelease, "order_status", st.Status(),
			"hold_status", st.HoldStatus(), "amount_received", p.AmountReceived)
		if err := st.Move(ctx, OrderRefunding); err != nil {
			return err
		}
		return st.Emit(ctx, outbox.TypeRefundRequested, outbox.RefundRequested{
			OrderID: st.ID(), PaymentIntentID: p.PaymentIntentID, Reason: ReasonCapturedAfterRelease,
		})
	default:
		st.log.InfoContext(ctx, "capture already applied; duplicate ignored", "order_status", st.Status())
		return nil
	}
}

// PaymentFailed answers a declined payment attempt or a refused capture.
//
// A decline of an order awaiting payment is counted on the order (its
// code kept for the buyer); while the event's attempts (onsale
// payment_attempts, default DefaultPaymentAttempts) are not used up, the
// order keeps awaiting payment and its hold keeps the seats, for the
// buyer to confirm the same PaymentIntent again (Stripe returns a
// declined intent to requires_payment_method). The decline that uses up
// the last attempt, or a refused capture (an order capture_pending), fails
// the order: hold released, seats released, and
// AuthorizationCancelRequested unless the intent was captured (or a
// cancel was requested already). A decline that reaches a capture_pending
// order is of an earlier attempt (the bus may deliver it after the later
// attempt's authorization) and changes nothing. For an order in any other
// state it does nothing. Each PaymentFailed is one attempt: the inbox applies an event
// once, and the provider sends one per declined attempt.
func (s *Saga) PaymentFailed(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
	return run(ctx, s, tx, ev, nil, s.paymentFailed)
}

func (s *Saga) paymentFailed(ctx context.Context, st *step, p outbox.PaymentFailed) error {
	st.log = st.log.With("code", p.Code)
	if st.Status() != OrderPendingPayment && st.Status() != OrderCapturePending {
		st.log.InfoContext(ctx, "payment failure for an order past payment; ignored", "order_status", st.Status())
		return nil
	}
	if st.Status() == OrderCapturePending && p.Code != CodeCaptureFailed {
		// A decline of an earlier attempt, written while the order still
		// awaited payment and applied after a later attempt's
		// authorization: the buyer has paid; only a refused capture fails
		// a capture_pending order.
		st.log.InfoContext(ctx, "decline of an earlier attempt after the authorization; ignored", "order_status", st.Status())
		return nil
	}
	if st.Status() == OrderPendingPayment {
		declines, allowed, err := st.RecordDecline(ctx, p.Code)
		if err != nil {
			return err
		}
		if declines < allowed {
			st.log.InfoContext(ctx, "payment declined; the buyer may try again", "declines", declines, "attempts_left", allowed-declines)
			return nil
		}
		st.log = st.log.With("declines", declines)
	}
	released, err := st.ReleaseSeats(ctx)
	if err != nil {
		return err
	}
	if st.HoldStatus() == HoldActive || st.HoldStatus() == HoldConfirmed {
		if err := st.MoveHold(ctx, HoldReleased); err != nil {
			return err
		}
	}
	if err := st.Move(ctx, OrderFailed); err != nil {
		return err
	}
	st.log.InfoContext(ctx, "payment failed; order failed and seats released", "seats_released", released)

	payment, err := sqlcgen.New().PaymentIntentGetByOrder(ctx, st.tx, st.ID())
	switch {
	case err == nil && payment.Status == paymentCaptured:
		st.log.WarnContext(ctx, "payment failed after its intent was captured; not canceling it")
		return nil
	case err != nil && !errors.Is(err, db.ErrNotFound):
		return fmt.Errorf("read payment: %w", err)
	}
	return st.requestCancel(ctx, p.PaymentIntentID, ReasonPaymentFailed)
}

// PaymentRefunded records what the provider refunded. AmountRefunded is
// the charge's refunded total (charge.refunded) or at least one refund's
// amount (refund.updated): either way no more than has been refunded, so
// whatever it covers is done. The order's refunds of selected tickets
// that the total covers are confirmed; a refunding order whose whole
// amount it covers becomes refunded (a webhook of an earlier partial
// refund, arriving late, leaves it refunding). Duplicates and webhooks
// out of order change nothing more. A refund of a paid or ticketed order
// that nobody asked for was made outside Boxoffice and is logged as a
// warning; of an order in any other state, it changes nothing.
func (s *Saga) PaymentRefunded(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
	return run(ctx, s, tx, ev, nil, s.paymentRefunded)
}

func (s *Saga) paymentRefunded(ctx context.Context, st *step, p outbox.PaymentRefunded) error {
	tx := st.tx
	confirmed, err := sqlcgen.New().RefundConfirmUpTo(ctx, tx, sqlcgen.RefundConfirmUpToParams{
		OrderID: st.ID(), AmountRefunded: p.AmountRefunded,
	})
	if err != nil {
		return fmt.Errorf("confirm refunds: %w", err)
	}
	if confirmed > 0 {
		st.log.InfoContext(ctx, "refunds of selected tickets confirmed", "refunds", confirmed, "amount_refunded", p.AmountRefunded)
	}
	switch st.Status() {
	case OrderRefunding:
		if p.AmountRefunded < st.AmountMinor() {
			st.log.InfoContext(ctx, "part of the order refunded; the rest is still on its way",
				"amount_refunded", p.AmountRefunded, "amount_minor", st.AmountMinor())
			return nil
		}
		if err := st.Move(ctx, OrderRefunded); err != nil {
			return err
		}
		st.log.InfoContext(ctx, "order refunded", "amount_refunded", p.AmountRefunded)
		return nil
	case OrderPaid, OrderTicketed:
		if confirmed == 0 {
			st.log.WarnContext(ctx, "refund of an order nobody asked to refund; made outside Boxoffice?",
				"order_status", st.Status(), "amount_refunded", p.AmountRefunded)
		}
		return nil
	default:
		st.log.InfoContext(ctx, "refund already applied or not ours; ignored", "order_status", st.Status())
		return nil
	}
}

// AuthorizationCanceled records that the provider canceled the order's
// intent: the payments row's status becomes canceled. A payments row not
// written yet is ErrTooEarly; a row naming another intent, or already
// canceled, is left alone.
func (s *Saga) AuthorizationCanceled(ctx context.Context, tx pgx.Tx, ev outbox.Envelope) error {
	return run(ctx, s, tx, ev, nil, s.authorizationCanceled)
}

func (s *Saga) authorizationCanceled(ctx context.Context, st *step, p outbox.AuthorizationCanceled) error {
	tx := st.tx
	q := sqlcgen.New()
	payment, err := q.PaymentIntentGetByOrder(ctx, st.tx, st.ID())
	switch {
	case errors.Is(err, db.ErrNotFound) || err == nil && payment.PaymentIntentID == nil:
		st.log.InfoContext(ctx, "cancellation arrived before the payment row; retrying later")
		return fmt.Errorf("AuthorizationCanceled for order %s without a payment row: %w", st.ID(), ErrTooEarly)
	case err != nil:
		return fmt.Errorf("read payment: %w", err)
	case *payment.PaymentIntentID != p.PaymentIntentID:
		st.log.WarnContext(ctx, "cancellation of an intent that is not the order's; ignored")
		return nil
	case payment.Status == "canceled":
		st.log.InfoContext(ctx, "cancellation already recorded; duplicate ignored")
		return nil
	}
	if _, err := record.Status(ctx, db.Deferring(tx), st.ID(), p.PaymentIntentID, "canceled"); err != nil {
		return fmt.Errorf("mark payment canceled: %w", err)
	}
	st.log.InfoContext(ctx, "authorization canceled", "order_status", st.Status())
	return nil
}

// SagaConsumer is the durable name of the consumer that runs the saga's
// steps: the AppliedBy of an event a step was applied for in the
// transaction that wrote it (Apply).
const SagaConsumer = "purchase_saga"

// Apply runs the step of ev's type in tx, as the saga's consumer does,
// for a writer that holds the fact before it reaches the bus: the payment
// ingress, in the transaction that records the provider's webhook, and
// the payment commands, in the one that records a new intent. Once
// the order and its hold are locked it calls before (when not nil) with
// them: an error from before ends Apply with that error and nothing of
// the step written; before writes ev itself, with the order's correlation
// id and AppliedBy SagaConsumer, so the saga's consumer acks it without a
// second effect. The step's errors are those of the method of ev's type;
// an order that does not exist is also ErrOrderNotFound.
func (s *Saga) Apply(ctx context.Context, tx pgx.Tx, ev outbox.Envelope, before func(*OrderTx) error) error {
	for _, st := range sagaSteps {
		if st.eventType == ev.EventType {
			return st.apply(ctx, s, tx, ev, before)
		}
	}
	return fmt.Errorf("%w: the saga has no step for %s", ErrPermanent, ev.EventType)
}

// sagaStep runs one step of the saga, as Apply does.
type sagaStep func(ctx context.Context, s *Saga, tx pgx.Tx, ev outbox.Envelope, before func(*OrderTx) error) error

// sagaStepOf is a step with the type of the event it applies.
type sagaStepOf struct {
	eventType string
	apply     sagaStep
}

// sagaSteps are the saga's steps, each with the type of the event it
// applies (docs/saga.md, the purchase_saga rows): the one list of them,
// which Apply runs and SagaTypes names. HoldCreated is not one: the hold
// transaction writes its PaymentAuthorizationRequested itself, and a saga
// reading HoldCreated too would request a second PaymentIntent.
var sagaSteps = []sagaStepOf{
	{outbox.TypePaymentIntentCreated, stepOf((*Saga).paymentIntentCreated)},
	{outbox.TypePaymentAuthorized, stepOf((*Saga).paymentAuthorized)},
	{outbox.TypePaymentCaptured, stepOf((*Saga).paymentCaptured)},
	{outbox.TypePaymentFailed, stepOf((*Saga).paymentFailed)},
	{outbox.TypePaymentRefunded, stepOf((*Saga).paymentRefunded)},
	{outbox.TypeAuthorizationCanceled, stepOf((*Saga).authorizationCanceled)},
}

// SagaTypes returns the types of the events the saga has a step for, in
// the order of its steps: the subjects its consumer reads.
func SagaTypes() []string {
	return sliceutil.Map(sagaSteps, func(st sagaStepOf) string { return st.eventType })
}

// stepOf is the step whose payload is a T and whose body is body (a
// method expression of one of the saga's step bodies).
func stepOf[T any](body func(s *Saga, ctx context.Context, st *step, p T) error) sagaStep {
	return func(ctx context.Context, s *Saga, tx pgx.Tx, ev outbox.Envelope, before func(*OrderTx) error) error {
		return run(ctx, s, tx, ev, before, func(ctx context.Context, st *step, p T) error { return body(s, ctx, st, p) })
	}
}

// run is every step's frame: open, before, then the step's body.
func run[T any](ctx context.Context, s *Saga, tx pgx.Tx, ev outbox.Envelope, before func(*OrderTx) error, body func(context.Context, *step, T) error) error {
	st, p, err := open[T](ctx, s, tx, ev)
	if err != nil {
		return err
	}
	if before != nil {
		if err := before(st.OrderTx); err != nil {
			return err
		}
	}
	return body(ctx, st, p)
}

// step is one saga step in progress: the incoming event and its order,
// locked with its hold.
type step struct {
	*OrderTx
	log *slog.Logger
}

// paymentRef is what every payment fact the saga applies names.
type paymentRef struct {
	OrderID         uuid.UUID `json:"order_id"`
	PaymentIntentID string    `json:"payment_intent_id"`
}

// open is every step's opening: it decodes ev's payload as T, checks that
// it names the envelope's order, and locks the order and its hold.
func open[T any](ctx context.Context, s *Saga, tx pgx.Tx, ev outbox.Envelope) (*step, T, error) {
	p, err := decode[T](ev)
	if err != nil {
		return nil, p, err
	}
	// The same bytes, read for the fields every payment fact has: they
	// decode, since T's did.
	ref, err := decode[paymentRef](ev)
	if err != nil {
		return nil, p, err
	}
	st, err := s.begin(ctx, tx, ev, ref.OrderID)
	if err != nil {
		return nil, p, err
	}
	st.log = st.log.With("payment_intent_id", ref.PaymentIntentID)
	return st, p, nil
}

// begin checks that the payload names the envelope's order, then locks the
// order and its hold, in that order.
func (s *Saga) begin(ctx context.Context, tx pgx.Tx, ev outbox.Envelope, payloadOrderID uuid.UUID) (*step, error) {
	if payloadOrderID != uuid.Nil && payloadOrderID != ev.AggregateID {
		return nil, fmt.Errorf("%w: %s payload names order %s, its envelope %s", ErrPermanent, ev.EventType, payloadOrderID, ev.AggregateID)
	}
	o, err := LockOrderWithHold(ctx, tx, ev.AggregateID, Cause{
		CorrelationID: ev.CorrelationID, CausationID: ev.EventID.String(), Now: s.nowFunc,
	})
	if errors.Is(err, ErrOrderNotFound) {
		return nil, fmt.Errorf("%w: %w: %s names order %s", ErrPermanent, ErrOrderNotFound, ev.EventType, ev.AggregateID)
	} else if err != nil {
		return nil, err
	}
	// The order's own correlation id when the event has none yet (one
	// applied as it is written: Apply).
	log := s.logger.With("event_id", ev.EventID, "event_type", ev.EventType, "order_id", ev.AggregateID,
		"correlation_id", o.CorrelationID(), "causation_id", ev.CausationID)
	o.cause.Logger = log
	return &step{OrderTx: o, log: log}, nil
}

// expireHold does for the locked, active, pending order's hold what the
// expiry worker does: seats released, hold expired, order failed,
// HoldExpired written.
func (st *step) expireHold(ctx context.Context) error {
	seats, err := st.Seats(ctx)
	if err != nil {
		return err
	}
	if _, err := st.ReleaseSeats(ctx); err != nil {
		return err
	}
	if err := st.MoveHold(ctx, HoldExpired); err != nil {
		return err
	}
	if err := st.Move(ctx, OrderFailed); err != nil {
		return err
	}
	return st.Emit(ctx, outbox.TypeHoldExpired, outbox.HoldExpired{OrderID: st.ID(), HoldID: st.HoldID(), SeatIDs: seats})
}

// requestCancel is OrderTx.RequestCancel, logged.
func (st *step) requestCancel(ctx context.Context, intentID, reason string) error {
	wrote, err := st.RequestCancel(ctx, intentID, reason)
	switch {
	case err != nil:
		return err
	case wrote:
		st.log.InfoContext(ctx, "authorization cancel requested", "reason", reason, "order_status", st.Status())
	default:
		st.log.InfoContext(ctx, "no authorization cancel to request: none known, or one requested already", "order_status", st.Status())
	}
	return nil
}

// releaseReason says why the locked order no longer wants its payment.
func (st *step) releaseReason() string {
	switch {
	case st.HoldStatus() == HoldExpired:
		return ReasonHoldExpired
	case st.Status() == OrderCanceled:
		return ReasonOrderCanceled
	default:
		return ReasonOrderFailed
	}
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
