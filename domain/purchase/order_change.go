package purchase

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/outbox"
)

// OrderChange is what one order event says of its order as the order's
// owner sees it (OrderState): the status the event's transaction left the
// order in and the PaymentIntent it recorded, read from the event's own
// content (OrderChangeOf), so that whoever follows an order by its events
// need not read the order to know it.
type OrderChange struct {
	// Status is the status the event's transaction left the order in,
	// for the events only ever written with the order in one status; ""
	// for the events written with no change of status.
	Status OrderStatus
	// PaymentIntentID is the PaymentIntent the event's transaction
	// recorded on the order's payment row (PaymentIntentCreated); else "".
	PaymentIntentID string
	// At is when the event occurred, by its writer's clock.
	At time.Time
	// Unknown is set when the event's content does not say what the
	// order is now: read the order to know it. See OrderChangeOf for
	// which events.
	Unknown bool
}

// OrderChangeOf is what ev, an order event, says of its order, from the
// transactions that write each type (this package's steps, payments/,
// tickets/, ops/reconcile):
//
//   - HoldCreated: with the order, in pending_payment.
//   - PaymentIntentCreated: with the payment row naming the intent; no
//     change of status.
//   - OrderConfirmed: pending_payment → capture_pending.
//   - TicketIssueRequested: capture_pending → paid (the saga), or written
//     alone for an order that is paid already (the reconciler's repair).
//   - TicketIssued: paid → ticketed.
//   - HoldExpired: pending_payment → failed.
//   - OrderCanceled: pending_payment → canceled.
//   - RefundRequested: → refunding, or for an order already refunding
//     (the reconciler's repair); with a RefundID (selected tickets of a
//     ticketed order), no change of status.
//   - PaymentAuthorizationRequested, PaymentAuthorized, CaptureRequested,
//     PaymentCaptured, AuthorizationCanceled: commands and provider facts
//     written with no change; the steps that apply them write an event
//     of their own when they change the status.
//
// Unknown, the content does not say: AuthorizationCancelRequested (written
// with a release that has its own event, or as the only event of the
// saga's pending_payment → failed of an order whose hold is no longer
// active); PaymentFailed and PaymentRefunded (a consumer applies them
// next and may change the status with no event of its own); a type this
// version does not know; a payload that does not decode.
func OrderChangeOf(ev outbox.Envelope) OrderChange {
	ch := OrderChange{At: ev.OccurredAt}
	switch ev.EventType {
	case outbox.TypeHoldCreated:
		ch.Status = OrderPendingPayment
	case outbox.TypePaymentIntentCreated:
		var p outbox.PaymentIntentCreated
		if json.Unmarshal(ev.Payload, &p) != nil || p.PaymentIntentID == "" {
			ch.Unknown = true
		}
		ch.PaymentIntentID = p.PaymentIntentID
	case outbox.TypeOrderConfirmed:
		ch.Status = OrderCapturePending
	case outbox.TypeTicketIssueRequested:
		ch.Status = OrderPaid
	case outbox.TypeTicketIssued:
		ch.Status = OrderTicketed
	case outbox.TypeHoldExpired:
		ch.Status = OrderFailed
	case outbox.TypeOrderCanceled:
		ch.Status = OrderCanceled
	case outbox.TypeRefundRequested:
		var p outbox.RefundRequested
		switch {
		case json.Unmarshal(ev.Payload, &p) != nil:
			ch.Unknown = true
		case p.RefundID == uuid.Nil:
			ch.Status = OrderRefunding
		}
	case outbox.TypePaymentAuthorizationRequested, outbox.TypePaymentAuthorized, outbox.TypeCaptureRequested,
		outbox.TypePaymentCaptured, outbox.TypeAuthorizationCanceled:
	default:
		ch.Unknown = true
	}
	return ch
}
