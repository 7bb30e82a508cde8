package handlers_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/cells"
	"boxoffice/domain/payments/sandbox"
	"boxoffice/handlers"
	"boxoffice/platform/auth"
)

// Every operation buyers may call is for buyers alone: an organizer's
// and a scanner's token whose sub is a buyer's id get a 403 problem on
// each of them (the operations read from the API's own registrations,
// sandbox payments included), and never see or change that buyer's
// order, which the buyer's own token still lists.
func TestBuyerOperationsAreForBuyersOnly(t *testing.T) {
	t.Parallel()
	b := setupSandbox(t)
	ev := b.createEvent(t, b.organizer(t))
	buyerID, buyer := b.buyer(t)
	held := b.hold(t, buyer, b.admit(t, buyer, ev.ID), ev.ID, "k", ev.Seats[0])
	require.Equal(t, http.StatusAccepted, held.status, "%s", held.body)
	orderID := held.json(t)["orderId"].(string)
	impostors := map[string]string{
		"Organizer": b.token(t, auth.Identity{UserID: buyerID, Role: auth.RoleOrganizer, OrganizerID: uuid.New()}),
		"Scanner":   b.token(t, auth.Identity{UserID: buyerID, Role: auth.RoleScanner, OrganizerID: uuid.New()}),
	}
	fill := strings.NewReplacer("{eventId}", ev.ID, "{orderId}", orderID, "{id}", "pi_test_buyer_routes")

	ops := fuzzOperations(t, fuzzConfig(handlers.Config{Cells: cells.Single(&cells.Cell{Name: cells.Default, Sandbox: &sandbox.Sandbox{}})}))
	var checked []string
	for _, op := range ops {
		if !slices.Contains(op.roles, auth.RoleBuyer) {
			continue
		}
		checked = append(checked, op.id)
		for name, tok := range impostors {
			res := b.api.do(t, op.method, fill.Replace(op.path), bearer(tok), nil)
			require.Equal(t, http.StatusForbidden, res.status, "%s on %s: %s", name, op.id, res.body)
			require.Equal(t, handlers.TypeForbidden, problemType(t, res), "%s on %s", name, op.id)
		}
		require.Equal(t, []auth.Role{auth.RoleBuyer}, op.roles, op.id)
	}
	require.Subset(t, checked, []string{"list-orders", "get-order", "cancel-order", "stream-order-events", "create-hold"})

	res := b.api.do(t, http.MethodGet, "/v1/orders", bearer(buyer), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	orders := res.json(t)["orders"].([]any)
	require.Len(t, orders, 1)
	require.Equal(t, orderID, orders[0].(map[string]any)["id"])
	require.Equal(t, "pending_payment", orders[0].(map[string]any)["status"], "no impostor canceled it")
}
