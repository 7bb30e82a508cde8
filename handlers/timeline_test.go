package handlers_test

import (
	"context"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/tickets"
	"boxoffice/domain/timeline"
	"boxoffice/handlers"
	"boxoffice/platform/db"
	"boxoffice/testkit/dbtest"
)

// The organizer of the order's event reads its story, a refund of one of
// its tickets included: the RefundRequested event, the refund and the
// revoked ticket, after the hold and the tickets; the other ticket's
// check-in at its gate. Every answer is checked
// against the contract (b.do); another organizer gets 404 as if the order
// did not exist, a buyer (its owner too) 403, and an id that is not a
// UUID 422.
func TestOrderTimeline(t *testing.T) {
	t.Parallel()
	seed, err := tickets.GenerateSeed()
	require.NoError(t, err)
	signer, err := tickets.NewSigner(seed)
	require.NoError(t, err)
	b := setup(t)
	org, _ := b.organizerOf(t)
	ev := b.createEvent(t, org)
	issuer := tickets.NewIssuer(tickets.IssuerConfig{Signer: signer, Logger: b.logs.Logger})

	_, buyer := b.buyer(t)
	res := b.hold(t, buyer, b.admit(t, buyer, ev.ID), ev.ID, uuid.NewString(), ev.Seats[0], ev.Seats[1])
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	orderID := res.json(t)["orderId"].(string)
	dbtest.Exec(t, b.pool, `INSERT INTO payments (order_id, provider, payment_intent_id, client_secret, status, amount_minor, currency)
		SELECT id, 'sandbox', $2, $3, 'succeeded', amount_minor, currency FROM orders WHERE id = $1`,
		orderID, "pi_"+strings.ReplaceAll(uuid.NewString(), "-", ""), b.remember("pi_x_secret_timeline"))
	b.setOrderStatus(t, orderID, "paid")
	var issued tickets.Issued
	require.NoError(t, db.WithTx(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
		var err error
		issued, err = issuer.Issue(ctx, tx, tickets.IssueParams{OrderID: uuid.MustParse(orderID)})
		return err
	}))
	require.Len(t, issued.TicketIDs, 2)
	refunded := issued.TicketIDs[0].String()
	r := b.do(t, http.MethodPost, "/v1/orders/"+orderID+"/refund", bearer(org), map[string]any{"ticketIds": []string{refunded}})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)

	// The other ticket is scanned at the door.
	dbtest.Exec(t, b.pool, `INSERT INTO check_ins (ticket_id, event_id, gate, scanned_at)
		SELECT id, event_id, 'north', now() FROM tickets WHERE id = $1`, issued.TicketIDs[1])

	path := "/v1/orders/" + orderID + "/timeline"
	got := b.do(t, http.MethodGet, path, bearer(org), nil)
	require.Equal(t, http.StatusOK, got.status, "%s", got.body)
	require.NotContains(t, string(got.body), "_secret_", "no client secret")
	body := got.json(t)
	require.Equal(t, orderID, body["orderId"])
	require.Equal(t, "ticketed", body["status"])
	var kinds []string
	facts := map[string]map[string]any{}
	for _, f := range body["facts"].([]any) {
		fact := f.(map[string]any)
		kind := fact["kind"].(string)
		if typ, _ := fact["type"].(string); kind == "event" {
			kind += " " + typ
		}
		kinds = append(kinds, kind)
		if _, seen := facts[kind]; !seen {
			facts[kind] = fact
		}
	}
	at := func(kind string) int {
		i := slices.Index(kinds, kind)
		require.GreaterOrEqual(t, i, 0, "no %s in %v", kind, kinds)
		return i
	}
	require.Less(t, at("order.created"), at("hold.created"))
	require.Less(t, at("hold.created"), at("event HoldCreated"))
	require.Less(t, at("event HoldCreated"), at("event PaymentAuthorizationRequested"))
	require.Less(t, at("event PaymentAuthorizationRequested"), at("ticket.issued"))
	require.Less(t, at("ticket.issued"), at("refund.requested"))
	require.Less(t, at("ticket.issued"), at("event RefundRequested"))
	require.Equal(t, refunded, facts["ticket.revoked"]["id"])
	require.Equal(t, issued.TicketIDs[1].String(), facts["ticket.checked_in"]["id"])
	require.Equal(t, "gate north", facts["ticket.checked_in"]["detail"])
	require.Contains(t, facts["refund.requested"]["detail"], "for 1 ticket(s)")
	require.Equal(t, facts["event HoldCreated"]["id"], facts["event PaymentAuthorizationRequested"]["causationId"])

	other, _ := b.organizerOf(t)
	res = b.do(t, http.MethodGet, path, bearer(other), nil)
	require.Equal(t, http.StatusNotFound, res.status, "%s", res.body)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/v1/orders/"+uuid.NewString()+"/timeline", bearer(org), nil).status)
	require.Equal(t, http.StatusForbidden, b.do(t, http.MethodGet, path, bearer(buyer), nil).status)
	require.Equal(t, http.StatusUnprocessableEntity, b.do(t, http.MethodGet, "/v1/orders/not-a-uuid/timeline", bearer(org), nil).status)
}

// The contract's kinds of fact are the story's: a kind added to package
// timeline is added to the schema's enum too.
func TestTimelineFactKindsMatchTheContract(t *testing.T) {
	t.Parallel()
	f, ok := reflect.TypeFor[handlers.TimelineFactBody]().FieldByName("Kind")
	require.True(t, ok)
	require.ElementsMatch(t, timeline.Kinds, strings.Split(f.Tag.Get("enum"), ","))
}
