package purchase

import (
	"fmt"
	"slices"
	"strings"

	"boxoffice/platform/outbox"
)

// OrderStatus is where an order is in its purchase. The values are the
// orders.status column's; Transitions says which step moves an order from
// one to another, and nothing else does.
type OrderStatus string

// Order statuses.
const (
	OrderPendingPayment OrderStatus = "pending_payment"
	// OrderAuthorized is reserved: no step writes it, but the column
	// allows it and every rule below treats it as pending_payment.
	OrderAuthorized     OrderStatus = "authorized"
	OrderCapturePending OrderStatus = "capture_pending"
	OrderPaid           OrderStatus = "paid"
	OrderTicketed       OrderStatus = "ticketed"
	OrderFailed         OrderStatus = "failed"
	OrderCanceled       OrderStatus = "canceled"
	OrderRefunding      OrderStatus = "refunding"
	OrderRefunded       OrderStatus = "refunded"
)

// OrderStatuses are every order status, in the lifecycle's order.
var OrderStatuses = []OrderStatus{
	OrderPendingPayment, OrderAuthorized, OrderCapturePending, OrderPaid, OrderTicketed,
	OrderFailed, OrderCanceled, OrderRefunding, OrderRefunded,
}

// ParseOrderStatus returns the order status named s, and whether there is
// one.
func ParseOrderStatus(s string) (OrderStatus, bool) {
	st := OrderStatus(s)
	return st, slices.Contains(OrderStatuses, st)
}

// HoldStatus is where a hold is: it owns its seats while active or
// confirmed.
type HoldStatus string

// Hold statuses.
const (
	HoldActive    HoldStatus = "active"
	HoldConfirmed HoldStatus = "confirmed"
	HoldExpired   HoldStatus = "expired"
	HoldReleased  HoldStatus = "released"
)

// Transition is one move of the order lifecycle: what moves an order From
// one status To another, and who does it.
type Transition struct {
	From, To OrderStatus
	// By is the step that makes the move: the event or request it reacts
	// to and the role that applies it.
	By string
}

// Transitions is the order lifecycle: every move any code makes, and no
// other (OrderTx.Move refuses the rest). docs/saga.md § States is checked
// against it (TestSagaDocStates).
var Transitions = []Transition{
	{OrderPendingPayment, OrderCapturePending, "`PaymentAuthorized` while the hold owns its seats (saga)"},
	{OrderPendingPayment, OrderFailed, "hold expired (expiry worker, or the saga on a late `PaymentAuthorized`); the `PaymentFailed` that uses up the last payment attempt (saga)"},
	{OrderPendingPayment, OrderCanceled, "the buyer's cancel (API)"},
	{OrderCapturePending, OrderPaid, "`PaymentCaptured` (saga)"},
	{OrderCapturePending, OrderFailed, "`PaymentFailed`, the capture refused (saga)"},
	{OrderPaid, OrderTicketed, "`TicketIssueRequested` (tickets)"},
	{OrderPaid, OrderRefunding, "the organizer's refund (API)"},
	{OrderTicketed, OrderRefunding, "the organizer's refund (API)"},
	{OrderPaid, OrderCanceled, "the organizer's refund of an order it issued, a void (API)"},
	{OrderTicketed, OrderCanceled, "the organizer's refund of an order it issued, a void (API)"},
	{OrderFailed, OrderRefunding, "`PaymentCaptured` after the order was released: an incident (saga)"},
	{OrderCanceled, OrderRefunding, "`PaymentCaptured` after the order was released: an incident (saga)"},
	{OrderRefunding, OrderRefunded, "`PaymentRefunded` (saga)"},
}

// Precedes reports whether the lifecycle leads from s to t: whether
// Transitions move an order in s to t in one move or more (the reserved
// authorized counts as pending_payment). Transitions have no cycle
// (TestTransitionsHaveNoCycle), so an order never comes back to a status
// it left: of two statuses one order had, the one that precedes the
// other is the older, and a status precedes no status an order had
// before it, nor itself. Whoever learns of an order's changes out of
// order (OrderState.Apply) tells old from new by it.
func (s OrderStatus) Precedes(t OrderStatus) bool {
	return successors[s.lifecycle()][t.lifecycle()]
}

// lifecycle is s as Transitions know it: the reserved authorized is
// pending_payment.
func (s OrderStatus) lifecycle() OrderStatus {
	if s == OrderAuthorized {
		return OrderPendingPayment
	}
	return s
}

// successors are the statuses each status precedes (Precedes), from
// Transitions.
var successors = func() map[OrderStatus]map[OrderStatus]bool {
	next := map[OrderStatus][]OrderStatus{}
	for _, tr := range Transitions {
		next[tr.From] = append(next[tr.From], tr.To)
	}
	out := map[OrderStatus]map[OrderStatus]bool{}
	for _, from := range OrderStatuses {
		seen := map[OrderStatus]bool{}
		todo := slices.Clone(next[from])
		for len(todo) > 0 {
			st := todo[len(todo)-1]
			todo = todo[:len(todo)-1]
			if !seen[st] {
				seen[st] = true
				todo = append(todo, next[st]...)
			}
		}
		out[from] = seen
	}
	return out
}()

// HoldTransitions is the hold lifecycle, as Transitions is the order's.
var HoldTransitions = []struct {
	From, To HoldStatus
	By       string
}{
	{HoldActive, HoldConfirmed, "`PaymentAuthorized` in time (saga)"},
	{HoldActive, HoldExpired, "its expiry (expiry worker, or the saga on a late `PaymentAuthorized`)"},
	{HoldActive, HoldReleased, "the buyer's cancel (API); `PaymentFailed` (saga)"},
	{HoldConfirmed, HoldReleased, "`PaymentFailed` at capture (saga); the refund of a paid order (API)"},
}

// CanMove reports whether Transitions has the move from → to.
func CanMove(from, to OrderStatus) bool {
	return slices.ContainsFunc(Transitions, func(t Transition) bool { return t.From == from && t.To == to })
}

// CanMoveHold reports whether HoldTransitions has the move from → to.
func CanMoveHold(from, to HoldStatus) bool {
	for _, t := range HoldTransitions {
		if t.From == from && t.To == to {
			return true
		}
	}
	return false
}

// Final reports whether s ends a purchase: ticketed, failed, canceled or
// refunded. No saga step moves such an order on by itself; only an
// organizer's refund of a ticketed order, or money captured after a
// release, does. refunding is not final.
func (s OrderStatus) Final() bool {
	switch s {
	case OrderTicketed, OrderFailed, OrderCanceled, OrderRefunded:
		return true
	}
	return false
}

// AwaitsPayment reports whether an order in s still waits for its buyer's
// card: the only state in which its owner is shown the PaymentIntent's
// client secret, and in which the buyer may cancel it.
func (s OrderStatus) AwaitsPayment() bool { return s == OrderPendingPayment }

// BeforeAuthorization reports whether an order in s has not had an
// authorization applied: pending_payment or the reserved authorized.
func (s OrderStatus) BeforeAuthorization() bool {
	return s == OrderPendingPayment || s == OrderAuthorized
}

// Captured reports whether the order's money was taken: paid or ticketed,
// or being or having been refunded.
func (s OrderStatus) Captured() bool { return s.Paid() || s == OrderRefunding || s == OrderRefunded }

// Released reports whether an order in s gave its seats back without
// being paid: failed or canceled. Money that reaches such an order is
// returned (canceled or refunded).
func (s OrderStatus) Released() bool { return s == OrderFailed || s == OrderCanceled }

// Paid reports whether the order's money was captured and is kept: paid
// or ticketed.
func (s OrderStatus) Paid() bool { return s == OrderPaid || s == OrderTicketed }

// ContradictedBy reports whether a payment fact of eventType (an outbox
// type the payment ingress derives from a provider webhook) contradicts an
// order in s, so that the webhook may be stale (webhooks arrive late and
// out of order) and the provider should be asked what is true now before
// acting on it. A fact that does not contradict its order is applied as
// it is.
func (s OrderStatus) ContradictedBy(eventType string) bool {
	switch eventType {
	case outbox.TypePaymentAuthorized:
		// After the order was released: the saga would cancel an intent
		// that may be canceled, or even captured, by now.
		return s.Released() || s == OrderRefunding || s == OrderRefunded
	case outbox.TypePaymentCaptured:
		// Before the authorization was applied, or after the order was
		// released: the saga would wait, or refund.
		return s.BeforeAuthorization() || s.Released()
	case outbox.TypePaymentFailed:
		// After the authorization was applied: the saga would fail an
		// order whose money may be captured.
		return s == OrderCapturePending || s.Paid() || s == OrderRefunding || s == OrderRefunded
	case outbox.TypeAuthorizationCanceled:
		// An order that keeps its payment: its intent is not canceled.
		return s == OrderCapturePending || s.Paid()
	}
	return false
}

// StatesMarkdown is docs/saga.md's table of the order and hold lifecycles,
// written from Transitions and HoldTransitions.
func StatesMarkdown() string {
	var b strings.Builder
	b.WriteString("| order from | to | by |\n|---|---|---|\n")
	for _, t := range Transitions {
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", t.From, t.To, t.By)
	}
	b.WriteString("\n| hold from | to | by |\n|---|---|---|\n")
	for _, t := range HoldTransitions {
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", t.From, t.To, t.By)
	}
	return b.String()
}
