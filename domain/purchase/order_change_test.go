package purchase_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/platform/outbox"
)

// Every order event says what its writers leave the order in, from its
// own content; what it cannot say is Unknown.
func TestOrderChangeOf(t *testing.T) {
	t.Parallel()
	order, at := uuid.New(), time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	event := func(typ string, payload any) outbox.Envelope {
		env, _, err := outbox.NewOrderEvent(typ, order, at, "", "", payload)
		require.NoError(t, err)
		return env
	}
	for _, tc := range []struct {
		name string
		ev   outbox.Envelope
		want purchase.OrderChange
	}{
		{"HoldCreated", event(outbox.TypeHoldCreated, outbox.HoldCreated{OrderID: order}),
			purchase.OrderChange{Status: purchase.OrderPendingPayment, At: at}},
		{"PaymentIntentCreated", event(outbox.TypePaymentIntentCreated, outbox.PaymentIntentCreated{OrderID: order, PaymentIntentID: "pi_1"}),
			purchase.OrderChange{PaymentIntentID: "pi_1", At: at}},
		{"OrderConfirmed", event(outbox.TypeOrderConfirmed, outbox.OrderConfirmed{OrderID: order}),
			purchase.OrderChange{Status: purchase.OrderCapturePending, At: at}},
		{"TicketIssueRequested", event(outbox.TypeTicketIssueRequested, outbox.TicketIssueRequested{OrderID: order}),
			purchase.OrderChange{Status: purchase.OrderPaid, At: at}},
		{"TicketIssued", event(outbox.TypeTicketIssued, outbox.TicketIssued{OrderID: order}),
			purchase.OrderChange{Status: purchase.OrderTicketed, At: at}},
		{"HoldExpired", event(outbox.TypeHoldExpired, outbox.HoldExpired{OrderID: order}),
			purchase.OrderChange{Status: purchase.OrderFailed, At: at}},
		{"OrderCanceled", event(outbox.TypeOrderCanceled, outbox.OrderCanceled{OrderID: order}),
			purchase.OrderChange{Status: purchase.OrderCanceled, At: at}},
		{"RefundRequestedWhole", event(outbox.TypeRefundRequested, outbox.RefundRequested{OrderID: order}),
			purchase.OrderChange{Status: purchase.OrderRefunding, At: at}},
		{"RefundRequestedOfTickets", event(outbox.TypeRefundRequested, outbox.RefundRequested{OrderID: order, RefundID: uuid.New(), AmountMinor: 1}),
			purchase.OrderChange{At: at}},
		{"PaymentAuthorizationRequested", event(outbox.TypePaymentAuthorizationRequested, outbox.PaymentAuthorizationRequested{OrderID: order}),
			purchase.OrderChange{At: at}},
		{"PaymentAuthorized", event(outbox.TypePaymentAuthorized, outbox.PaymentAuthorized{OrderID: order}), purchase.OrderChange{At: at}},
		{"CaptureRequested", event(outbox.TypeCaptureRequested, outbox.CaptureRequested{OrderID: order}), purchase.OrderChange{At: at}},
		{"PaymentCaptured", event(outbox.TypePaymentCaptured, outbox.PaymentCaptured{OrderID: order}), purchase.OrderChange{At: at}},
		{"AuthorizationCanceled", event(outbox.TypeAuthorizationCanceled, outbox.AuthorizationCanceled{OrderID: order}), purchase.OrderChange{At: at}},
		{"AuthorizationCancelRequested", event(outbox.TypeAuthorizationCancelRequested, outbox.AuthorizationCancelRequested{OrderID: order}),
			purchase.OrderChange{At: at, Unknown: true}},
		{"PaymentFailed", event(outbox.TypePaymentFailed, outbox.PaymentFailed{OrderID: order}), purchase.OrderChange{At: at, Unknown: true}},
		{"PaymentRefunded", event(outbox.TypePaymentRefunded, outbox.PaymentRefunded{OrderID: order}), purchase.OrderChange{At: at, Unknown: true}},
		{"UnknownType", event("OrderSomethingNew", map[string]any{}), purchase.OrderChange{At: at, Unknown: true}},
		{"PaymentIntentCreatedWithoutIntent", event(outbox.TypePaymentIntentCreated, map[string]any{}), purchase.OrderChange{At: at, Unknown: true}},
		{"UndecodablePayload", event(outbox.TypeRefundRequested, "not an object"), purchase.OrderChange{At: at, Unknown: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, purchase.OrderChangeOf(tc.ev))
		})
	}
}

// A change moves an order state forward only: a status the lifecycle
// leads to from the state's, a PaymentIntent it lacks. What it already
// shows, or shows past, is no change.
func TestOrderStateApply(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Second)
	pending := purchase.OrderState{Status: purchase.OrderPendingPayment, UpdatedAt: t0}
	paid := purchase.OrderState{Status: purchase.OrderPaid, UpdatedAt: t0, PaymentIntentID: "pi_1"}
	for _, tc := range []struct {
		name    string
		st      purchase.OrderState
		ch      purchase.OrderChange
		want    purchase.OrderState
		changed bool
	}{
		{"NewerStatus", pending, purchase.OrderChange{Status: purchase.OrderCapturePending, At: t1},
			purchase.OrderState{Status: purchase.OrderCapturePending, UpdatedAt: t1}, true},
		{"StatusSeveralMovesOn", pending, purchase.OrderChange{Status: purchase.OrderTicketed, At: t1},
			purchase.OrderState{Status: purchase.OrderTicketed, UpdatedAt: t1}, true},
		{"SameStatus", paid, purchase.OrderChange{Status: purchase.OrderPaid, At: t1}, paid, false},
		{"OlderStatus", paid, purchase.OrderChange{Status: purchase.OrderCapturePending, At: t1}, paid, false},
		{"StatusOnAnotherBranch", purchase.OrderState{Status: purchase.OrderCanceled}, purchase.OrderChange{Status: purchase.OrderFailed},
			purchase.OrderState{Status: purchase.OrderCanceled}, false},
		{"PaymentIntent", pending, purchase.OrderChange{PaymentIntentID: "pi_1", At: t1},
			purchase.OrderState{Status: purchase.OrderPendingPayment, UpdatedAt: t0, PaymentIntentID: "pi_1"}, true},
		{"PaymentIntentKnownAlready", paid, purchase.OrderChange{PaymentIntentID: "pi_2"}, paid, false},
		{"Unknown", pending, purchase.OrderChange{Status: purchase.OrderPaid, Unknown: true}, pending, false},
		{"ARead", pending, paid.Change(), paid, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, changed := tc.st.Apply(tc.ch)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.changed, changed)
		})
	}
}
