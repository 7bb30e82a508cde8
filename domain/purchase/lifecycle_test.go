package purchase_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
)

// TestSagaDocStates checks docs/saga.md's lifecycle tables against the
// transition tables the code enforces (OrderTx.Move refuses any other).
func TestSagaDocStates(t *testing.T) {
	raw, err := os.ReadFile("../../docs/saga.md")
	require.NoError(t, err)
	const begin, end = "<!-- states: from purchase.Transitions -->\n", "<!-- end states -->"
	doc := string(raw)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	require.True(t, i >= 0 && j > i, "docs/saga.md lacks the %q … %q block", begin, end)
	if os.Getenv("UPDATE_DOCS") != "" {
		doc = doc[:i+len(begin)] + purchase.StatesMarkdown() + doc[j:]
		require.NoError(t, os.WriteFile("../../docs/saga.md", []byte(doc), 0o644))
		return
	}
	require.Equal(t, purchase.StatesMarkdown(), doc[i+len(begin):j],
		"docs/saga.md's states disagree with purchase.Transitions: UPDATE_DOCS=1 go test ./domain/purchase -run TestSagaDocStates")
}

func TestTransitions(t *testing.T) {
	for _, tr := range purchase.Transitions {
		require.True(t, purchase.CanMove(tr.From, tr.To))
		if tr.From.Final() && tr.To != purchase.OrderRefunding {
			// Or an order the organizer issued, voided (refund.go's
			// voidIssued): nothing to refund through the provider.
			require.True(t, tr.From == purchase.OrderTicketed && tr.To == purchase.OrderCanceled,
				"a final status moves on only to refunding, or a voided issued order's to canceled: %s → %s", tr.From, tr.To)
		}
	}
	require.False(t, purchase.CanMove(purchase.OrderTicketed, purchase.OrderPaid))
	require.False(t, purchase.CanMove(purchase.OrderRefunded, purchase.OrderRefunding))
	require.False(t, purchase.CanMoveHold(purchase.HoldExpired, purchase.HoldActive))
}

// OrderStatuses lists every status the lifecycle moves between, once.
func TestOrderStatusesAreTheLifecycles(t *testing.T) {
	seen := map[purchase.OrderStatus]bool{}
	for _, st := range purchase.OrderStatuses {
		require.False(t, seen[st], "%s listed twice", st)
		seen[st] = true
		got, ok := purchase.ParseOrderStatus(string(st))
		require.True(t, ok)
		require.Equal(t, st, got)
	}
	for _, tr := range purchase.Transitions {
		require.True(t, seen[tr.From], "%s is not in OrderStatuses", tr.From)
		require.True(t, seen[tr.To], "%s is not in OrderStatuses", tr.To)
	}
	_, ok := purchase.ParseOrderStatus("shipped")
	require.False(t, ok)
}

// No status precedes itself: the lifecycle has no cycle, so Precedes
// orders the statuses one order has had. A status precedes what its moves
// lead to, however far, and nothing it comes from.
func TestTransitionsHaveNoCycle(t *testing.T) {
	t.Parallel()
	for _, st := range purchase.OrderStatuses {
		require.False(t, st.Precedes(st), "%s comes back to itself", st)
	}
	for _, tr := range purchase.Transitions {
		require.True(t, tr.From.Precedes(tr.To), "%s → %s", tr.From, tr.To)
		require.False(t, tr.To.Precedes(tr.From), "%s → %s", tr.From, tr.To)
	}
	p := purchase.OrderPendingPayment
	for _, later := range []purchase.OrderStatus{
		purchase.OrderCapturePending, purchase.OrderPaid, purchase.OrderTicketed,
		purchase.OrderFailed, purchase.OrderCanceled, purchase.OrderRefunding, purchase.OrderRefunded,
	} {
		require.True(t, p.Precedes(later), later)
		require.True(t, purchase.OrderAuthorized.Precedes(later), "authorized is pending_payment: %s", later)
	}
	require.False(t, p.Precedes(purchase.OrderAuthorized))
	require.False(t, purchase.OrderTicketed.Precedes(purchase.OrderPaid))
	require.False(t, purchase.OrderCanceled.Precedes(purchase.OrderFailed))
	require.False(t, purchase.OrderRefunded.Precedes(purchase.OrderRefunding))
}
