// Package reconcile compares the payment provider's PaymentIntents with
// local orders and emits the events that repair each mismatch (after a
// regional cutover, or whenever webhooks may have been lost:
// docs/design/payments.md and docs/design/regions.md).
//
// Reconciliation never moves money or order state itself. It writes, in
// one transaction under the order's row lock, the event the purchase saga
// would have received had nothing been lost — so every repair goes through
// the same saga steps, compensations and idempotency keys as the normal
// path:
//
//   - authorized at the provider, order still awaiting payment: the
//     authorization webhook was lost → PaymentAuthorized;
//   - authorized at the provider, order released (failed, canceled,
//     refunded): → AuthorizationCancelRequested, unless one was requested;
//   - captured at the provider, order confirmed (capture_pending) or
//     released (failed, canceled): the capture webhook was lost →
//     PaymentCaptured, on which the saga tickets the confirmed order and
//     refunds the released one;
//   - captured, order paid but without tickets → TicketIssueRequested;
//   - captured, order still awaiting payment (both webhooks lost) →
//     PaymentAuthorized and PaymentCaptured;
//   - authorized, order capture_pending: the capture command was lost
//     (dead-lettered, or never published) → CaptureRequested;
//   - authorized, order released with a cancel requested: the cancel
//     command was lost → AuthorizationCancelRequested again;
//   - captured, order refunding, the charge not refunded in full: the
//     refund command was lost → RefundRequested (what is left);
//   - captured, order refunding, the charge refunded in full: the refund
//     webhook was lost → PaymentRefunded.
//
// The last four are states every order passes through for a moment: they
// are repaired only once the order has been in them for Config.Settle.
// Every command is re-sent under the idempotency key the saga used
// ("capture:", "cancel:", "refund:" and the order id), so a repair racing
// the normal path acts once at the provider; the provider's answer to a
// command it already applied (captured, canceled, refunded) is acked.
//
// Each (intent, repair) is recorded in reconcile_repairs in the same
// transaction, so a second run, or two at once, repairs nothing twice; a
// run also finds nothing once the saga has acted. Intents without an
// order_id of ours are reported, not touched.
package reconcile

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"boxoffice/domain/payments"
	"boxoffice/domain/purchase"
	"boxoffice/platform/db"
	"boxoffice/platform/outbox"
	"boxoffice/sqlcgen"
)

// Repairs, as recorded and reported.
const (
	RepairAuthorization = "authorization_not_applied"
	RepairCancel        = "authorized_but_released"
	RepairCapture       = "capture_not_applied"
	RepairTickets       = "captured_not_ticketed"
	RepairCaptureSent   = "capture_not_sent"
	RepairCancelSent    = "cancel_not_sent"
	RepairRefundSent    = "refund_not_sent"
	RepairRefund        = "refund_not_applied"
)

// Repairs lists every repair, for metrics and reports.
var Repairs = []string{
	RepairAuthorization, RepairCancel, RepairCapture, RepairTickets,
	RepairCaptureSent, RepairCancelSent, RepairRefundSent, RepairRefund,
}

// Finding is one PaymentIntent that disagreed with its order.
type Finding struct {
	IntentID     string
	OrderID      uuid.UUID
	IntentStatus payments.IntentStatus
	OrderStatus  string
	// Repair is what it needs, one of the Repair constants, or "" when
	// nothing can be done automatically (Note says why).
	Repair string
	Note   string
	// Events are the event types emitted (or, in a dry run, that would be).
	Events []string
	// Applied is true when this run wrote the repair; false in a dry run,
	// or when an earlier run already had.
	Applied bool
}

// Report is the result of Run.
type Report struct {
	From, To time.Time
	DryRun   bool
	// Intents is how many intents the provider listed in the window.
	Intents  int
	Findings []Finding
}

// Config configures Run.
type Config struct {
	Pool     *pgxpool.Pool
	Provider payments.Provider
	Logger   *slog.Logger
	// DryRun reports what would be repaired and writes nothing.
	DryRun bool
	// Settle is how long an order must have been capture_pending,
	// refunding, or released with a cancel asked for, before a command
	// that should have moved it on counts as lost. Defaults to 10m.
	Settle time.Duration
}

// DefaultSettle is Config.Settle's default.
const DefaultSettle = 10 * time.Minute

// Run lists the provider's intents created in [from, to) and repairs each
// mismatch with its order, as the package documentation describes.
func Run(ctx context.Context, cfg Config, from, to time.Time) (Report, error) {
	intents, err := cfg.Provider.List(ctx, from, to)
	if err != nil {
		return Report{}, fmt.Errorf("list payment intents: %w", err)
	}
	r := Report{From: from, To: to, DryRun: cfg.DryRun, Intents: len(intents)}
	for _, in := range intents {
		f, ok, err := check(ctx, cfg, in)
		if err != nil {
			return r, fmt.Errorf("reconcile %s: %w", in.ID, err)
		}
		if ok {
			r.Findings = append(r.Findings, f)
		}
	}
	return r, nil
}

// check compares one intent with its order and, unless this is a dry run,
// repairs the mismatch in one transaction.
func check(ctx context.Context, cfg Config, in payments.Intent) (Finding, bool, error) {
	f := Finding{IntentID: in.ID, IntentStatus: in.Status}
	orderID, err := uuid.Parse(in.Metadata["order_id"])
	if err != nil {
		f.Note = "no order_id of ours in its metadata; not touched"
		return f, in.Status == payments.StatusRequiresCapture || in.Status == payments.StatusSucceeded, nil
	}
	f.OrderID = orderID
	found := false
	err = db.WithTx(ctx, cfg.Pool, func(ctx context.Context, tx pgx.Tx) error {
		q := sqlcgen.New()
		// Lock order: the order first, as every writer of its state does.
		order, err := q.OrderGetForUpdate(ctx, tx, orderID)
		if errors.Is(err, db.ErrNotFound) {
			if in.Status == payments.StatusRequiresCapture || in.Status == payments.StatusSucceeded {
				found = true
				f.Note = "its order does not exist here (another cell?); not touched"
			}
			return nil
		} else if err != nil {
			return fmt.Errorf("lock order: %w", err)
		}
		state, err := q.ReconcileOrder(ctx, tx, orderID)
		if err != nil {
			return fmt.Errorf("read order: %w", err)
		}
		f.OrderStatus = order.Status
		plan := decide(in, state, cmp.Or(cfg.Settle, DefaultSettle))
		if plan.repair == "" {
			return nil
		}
		found = true
		f.Repair, f.Note = plan.repair, plan.note
		f.Events = append(f.Events, plan.events...)
		if cfg.DryRun {
			return nil
		}
		eventID := uuid.NewSHA1(namespace, []byte(in.ID+"/"+plan.repair))
		n, err := q.ReconcileRepairRecord(ctx, tx, sqlcgen.ReconcileRepairRecordParams{
			PaymentIntentID: in.ID, Repair: plan.repair, OrderID: orderID, EventID: eventID,
		})
		if err != nil {
			return fmt.Errorf("record repair: %w", err)
		}
		if n == 0 {
			f.Note = "repaired by an earlier run; waiting for the saga"
			return nil
		}
		if plan.repair == RepairCancel {
			if stamped, err := purchase.MarkCancelRequested(ctx, tx, orderID); err != nil {
				return fmt.Errorf("stamp cancel request: %w", err)
			} else if !stamped {
				f.Note, f.Events = "a cancel was requested already", nil
				return nil
			}
		}
		for i, typ := range plan.events {
			payload, err := payloadFor(ctx, tx, typ, orderID, in)
			if err != nil {
				return err
			}
			env, raw, err := outbox.NewOrderEvent(typ, orderID, time.Now(), state.CorrelationID, "reconcile:"+in.ID, payload)
			if err != nil {
				return err
			}
			if i == 0 {
				env.EventID = eventID // the id recorded with the repair
				if raw, err = json.Marshal(env); err != nil {
					return fmt.Errorf("marshal %s envelope: %w", typ, err)
				}
			}
			if err := outbox.Insert(ctx, tx, env, raw); err != nil {
				return err
			}
		}
		f.Applied = true
		cfg.Logger.WarnContext(ctx, "reconcile: repaired a payment mismatch",
			"order_id", orderID, "correlation_id", state.CorrelationID, "causation_id", "reconcile:"+in.ID,
			"payment_intent_id", in.ID, "intent_status", in.Status, "order_status", order.Status,
			"repair", plan.repair, "events", plan.events)
		return nil
	})
	return f, found, err
}

// namespace derives repair event ids: one per intent and repair.
var namespace = uuid.MustParse("6f1c2b8e-3d0a-4b7e-9a55-0c1d2e3f4a5b")

type plan struct {
	repair string
	note   string
	events []string
}

// decide is the mismatch table of the package documentation.
func decide(in payments.Intent, o sqlcgen.ReconcileOrderRow, settle time.Duration) plan {
	order := purchase.OrderStatus(o.Status)
	settled := o.InStatusFor >= settle
	switch in.Status {
	case payments.StatusRequiresCapture:
		switch {
		case order.BeforeAuthorization():
			return plan{RepairAuthorization, "authorized at the provider; the order never learned it", []string{outbox.TypePaymentAuthorized}}
		case order == purchase.OrderCapturePending && settled:
			return plan{RepairCaptureSent, "confirmed and authorized, never captured: the capture is sent again", []string{outbox.TypeCaptureRequested}}
		case order.Released() || order == purchase.OrderRefunded:
			if o.CancelRequested {
				if !settled {
					return plan{} // a cancel is on its way
				}
				return plan{RepairCancelSent, "a cancel was asked for and never reached the provider: it is sent again",
					[]string{outbox.TypeAuthorizationCancelRequested}}
			}
			return plan{RepairCancel, "authorized at the provider for an order that no longer wants it", []string{outbox.TypeAuthorizationCancelRequested}}
		}
	case payments.StatusSucceeded:
		switch {
		case order.BeforeAuthorization():
			return plan{RepairCapture, "captured at the provider; the order never learned it was authorized or captured",
				[]string{outbox.TypePaymentAuthorized, outbox.TypePaymentCaptured}}
		case order == purchase.OrderCapturePending:
			return plan{RepairCapture, "captured at the provider; the order never learned it", []string{outbox.TypePaymentCaptured}}
		case order.Released():
			return plan{RepairCapture, "captured at the provider for a released order: the saga refunds it", []string{outbox.TypePaymentCaptured}}
		case order == purchase.OrderPaid:
			if o.Tickets == 0 {
				return plan{RepairTickets, "paid without tickets", []string{outbox.TypeTicketIssueRequested}}
			}
		case order == purchase.OrderRefunding && !settled:
			return plan{} // the refund is on its way
		case order == purchase.OrderRefunding && in.AmountRefunded < in.AmountReceived:
			return plan{RepairRefundSent, "refunding, and the provider has not refunded the charge in full: the refund is sent again",
				[]string{outbox.TypeRefundRequested}}
		case order == purchase.OrderRefunding:
			return plan{RepairRefund, "refunded at the provider; the order never learned it", []string{outbox.TypePaymentRefunded}}
		}
	}
	return plan{}
}

// payloadFor builds the payload of a repairing event from the intent as
// the provider reports it now.
func payloadFor(ctx context.Context, tx pgx.Tx, typ string, orderID uuid.UUID, in payments.Intent) (any, error) {
	switch typ {
	case outbox.TypePaymentAuthorized:
		amount := in.AmountCapturable
		if amount == 0 {
			amount = in.AmountReceived
		}
		return outbox.PaymentAuthorized{OrderID: orderID, PaymentIntentID: in.ID, AmountCapturable: amount, ProviderEventID: "reconcile"}, nil
	case outbox.TypePaymentCaptured:
		return outbox.PaymentCaptured{OrderID: orderID, PaymentIntentID: in.ID, AmountReceived: in.AmountReceived, ProviderEventID: "reconcile"}, nil
	case outbox.TypeAuthorizationCancelRequested:
		return outbox.AuthorizationCancelRequested{OrderID: orderID, PaymentIntentID: in.ID, Reason: "reconcile"}, nil
	case outbox.TypeCaptureRequested:
		return outbox.CaptureRequested{OrderID: orderID, PaymentIntentID: in.ID}, nil
	case outbox.TypeRefundRequested:
		return outbox.RefundRequested{OrderID: orderID, PaymentIntentID: in.ID, Reason: "reconcile"}, nil
	case outbox.TypePaymentRefunded:
		return outbox.PaymentRefunded{OrderID: orderID, PaymentIntentID: in.ID, AmountRefunded: in.AmountRefunded, ProviderEventID: "reconcile"}, nil
	case outbox.TypeTicketIssueRequested:
		q := sqlcgen.New()
		hold, err := q.HoldGetByOrderForUpdate(ctx, tx, orderID)
		if err != nil {
			return nil, fmt.Errorf("lock hold: %w", err)
		}
		seats, err := q.HoldSeatListByHold(ctx, tx, hold.ID)
		if err != nil {
			return nil, fmt.Errorf("list seats: %w", err)
		}
		return outbox.TicketIssueRequested{OrderID: orderID, HoldID: hold.ID, SeatIDs: seats}, nil
	}
	return nil, fmt.Errorf("no payload for %s", typ)
}

// Write prints the report for people.
func (r Report) Write(w io.Writer) error {
	mode := ""
	if r.DryRun {
		mode = " (dry run: nothing written)"
	}
	if _, err := fmt.Fprintf(w, "Reconciliation of PaymentIntents created %s to %s%s\n%d intents at the provider, %d mismatches\n\n",
		r.From.UTC().Format(time.RFC3339), r.To.UTC().Format(time.RFC3339), mode, r.Intents, len(r.Findings)); err != nil {
		return err
	}
	for _, f := range r.Findings {
		action := "reported"
		switch {
		case f.Applied:
			action = fmt.Sprintf("repaired: %v", f.Events)
		case r.DryRun && len(f.Events) > 0:
			action = fmt.Sprintf("would emit %v", f.Events)
		}
		if _, err := fmt.Fprintf(w, "  %s  order %s  intent %s, order %s  %s — %s\n",
			f.IntentID, f.OrderID, f.IntentStatus, orDash(f.OrderStatus), action, f.Note); err != nil {
			return err
		}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
