package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/tickets"
	"boxoffice/handlers"
	"boxoffice/platform/auth"
	"boxoffice/platform/db"
	"boxoffice/testkit/dbtest"
)

// A refund with resell: true puts the seat back on sale: another buyer
// holds it and is ticketed, the old ticket is refused at the door and the
// new one admitted. With resell: false (the default) the seat stays off
// sale.
func TestRefundResell(t *testing.T) {
	t.Parallel()
	seed, err := tickets.GenerateSeed()
	require.NoError(t, err)
	signer, err := tickets.NewSigner(seed)
	require.NoError(t, err)
	pool := dbtest.New(t)
	b := setupPool(t, pool, func(cfg *handlers.Config) { cellOf(cfg).Door = tickets.NewDoor(pool, signer.PublicKey()) })
	org, orgID := b.organizerOf(t)
	scanner := b.token(t, auth.Identity{UserID: uuid.New(), Role: auth.RoleScanner, OrganizerID: orgID})
	ev := b.createEvent(t, org)
	issuer := tickets.NewIssuer(tickets.IssuerConfig{Signer: signer, Logger: b.logs.Logger})

	// ticketed holds seat for a new buyer, pays and tickets the order, and
	// returns the order and its ticket's QR payload.
	ticketed := func(seat string) (orderID, payload string) {
		t.Helper()
		_, buyer := b.buyer(t)
		res := b.hold(t, buyer, b.admit(t, buyer, ev.ID), ev.ID, uuid.NewString(), seat)
		require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
		orderID = res.json(t)["orderId"].(string)
		dbtest.Exec(t, b.pool, `INSERT INTO payments (order_id, provider, payment_intent_id, status, amount_minor, currency)
			VALUES ($1, 'sandbox', $2, 'succeeded', 5000, 'eur')`, orderID, "pi_"+strings.ReplaceAll(uuid.NewString(), "-", ""))
		b.setOrderStatus(t, orderID, "paid")
		require.NoError(t, db.WithTx(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
			_, err := issuer.Issue(ctx, tx, tickets.IssueParams{OrderID: uuid.MustParse(orderID)})
			return err
		}))
		var qr string
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT qr_payload FROM tickets WHERE order_id = $1", orderID).Scan(&qr))
		return orderID, qr
	}
	refund := func(orderID string, body any) {
		t.Helper()
		res := b.do(t, http.MethodPost, "/v1/orders/"+orderID+"/refund", bearer(org), body)
		require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
		require.Equal(t, "refunding", res.json(t)["status"])
	}
	scan := func(payload string) response {
		return b.do(t, http.MethodPost, "/v1/events/"+ev.ID+"/check-ins", bearer(scanner), map[string]any{"qrPayload": payload, "gate": "main"})
	}

	first, oldTicket := ticketed(ev.Seats[0])
	refund(first, map[string]any{"resell": true})
	second, newTicket := ticketed(ev.Seats[0])
	require.NotEqual(t, first, second)
	r := scan(oldTicket)
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	require.Equal(t, handlers.TypeTicketRevoked, problemType(t, r))
	require.Equal(t, http.StatusCreated, scan(newTicket).status)
	require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM tickets WHERE seat_id = $1 AND revoked_at IS NULL", ev.Seats[0]))

	kept, _ := ticketed(ev.Seats[1])
	refund(kept, nil)
	_, buyer := b.buyer(t)
	res := b.hold(t, buyer, b.admit(t, buyer, ev.ID), ev.ID, "k", ev.Seats[1])
	require.Equal(t, http.StatusConflict, res.status, "the seat stays off sale: %s", res.body)
	require.Equal(t, handlers.TypeSeatUnavailable, problemType(t, res))

	res = b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/sales", bearer(org), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	seats := res.json(t)["seats"].(map[string]any)
	require.EqualValues(t, 1, seats["sold"], "the resold seat")
	require.EqualValues(t, 1, seats["refunded"], "the seat kept off sale")
}

// A refund of selected tickets over HTTP: one ticket of a two-ticket order
// is refunded (202, the order stays ticketed and lists the refund), that
// ticket is refused at the door while the other admits; a ticket of
// another order or a malformed id is a 422 that writes nothing; and the
// sales summary counts the refund once the provider confirms it.
func TestPartialRefundOverHTTP(t *testing.T) {
	t.Parallel()
	seed, err := tickets.GenerateSeed()
	require.NoError(t, err)
	signer, err := tickets.NewSigner(seed)
	require.NoError(t, err)
	pool := dbtest.New(t)
	b := setupPool(t, pool, func(cfg *handlers.Config) { cellOf(cfg).Door = tickets.NewDoor(pool, signer.PublicKey()) })
	org, orgID := b.organizerOf(t)
	scanner := b.token(t, auth.Identity{UserID: uuid.New(), Role: auth.RoleScanner, OrganizerID: orgID})
	ev := b.createEvent(t, org)
	issuer := tickets.NewIssuer(tickets.IssuerConfig{Signer: signer, Logger: b.logs.Logger})

	_, buyer := b.buyer(t)
	res := b.hold(t, buyer, b.admit(t, buyer, ev.ID), ev.ID, uuid.NewString(), ev.Seats[0], ev.Seats[1])
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	orderID := res.json(t)["orderId"].(string)
	dbtest.Exec(t, b.pool, `INSERT INTO payments (order_id, provider, payment_intent_id, status, amount_minor, currency)
		SELECT id, 'sandbox', $2, 'succeeded', amount_minor, currency FROM orders WHERE id = $1`, orderID, "pi_"+strings.ReplaceAll(uuid.NewString(), "-", ""))
	b.setOrderStatus(t, orderID, "paid")
	require.NoError(t, db.WithTx(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := issuer.Issue(ctx, tx, tickets.IssueParams{OrderID: uuid.MustParse(orderID)})
		return err
	}))
	order := b.do(t, http.MethodGet, "/v1/orders/"+orderID, bearer(buyer), nil).json(t)
	tks := order["tickets"].([]any)
	require.Len(t, tks, 2)
	first, second := tks[0].(map[string]any), tks[1].(map[string]any)
	path := "/v1/orders/" + orderID + "/refund"

	for name, body := range map[string]any{
		"AnotherOrdersTicket": map[string]any{"ticketIds": []string{first["id"].(string), uuid.NewString()}},
		"NotAUUID":            map[string]any{"ticketIds": []string{"seat-1"}},
		"Duplicates":          map[string]any{"ticketIds": []string{first["id"].(string), first["id"].(string)}},
	} {
		r := b.do(t, http.MethodPost, path, bearer(org), body)
		require.Equal(t, http.StatusUnprocessableEntity, r.status, "%s: %s", name, r.body)
	}
	require.Zero(t, b.outboxCount(t, orderID, "RefundRequested"), "a refused refund writes nothing")

	r := b.do(t, http.MethodPost, path, bearer(org), map[string]any{"ticketIds": []string{first["id"].(string)}})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	require.Equal(t, "ticketed", r.json(t)["status"], "the order keeps its other ticket")
	require.EqualValues(t, 1, b.outboxCount(t, orderID, "RefundRequested"))

	order = b.do(t, http.MethodGet, "/v1/orders/"+orderID, bearer(buyer), nil).json(t)
	refunds := order["refunds"].([]any)
	require.Len(t, refunds, 1)
	refund := refunds[0].(map[string]any)
	require.Equal(t, []any{first["id"]}, refund["ticketIds"])
	require.Equal(t, "requested", refund["status"])
	require.EqualValues(t, order["amountMinor"].(float64)/2, refund["amountMinor"], "one of two seats at one price")

	scan := func(payload any) response {
		return b.do(t, http.MethodPost, "/v1/events/"+ev.ID+"/check-ins", bearer(scanner), map[string]any{"qrPayload": payload, "gate": "main"})
	}
	rs := scan(first["qrPayload"])
	require.Equal(t, http.StatusConflict, rs.status, "%s", rs.body)
	require.Equal(t, handlers.TypeTicketRevoked, problemType(t, rs))
	require.Equal(t, http.StatusCreated, scan(second["qrPayload"]).status)

	sales := func() map[string]any {
		res := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/sales", bearer(org), nil)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		return res.json(t)
	}
	require.EqualValues(t, 0, sales()["refundedMinor"], "not refunded until the provider confirms")
	dbtest.Exec(t, b.pool, "UPDATE refunds SET status = 'succeeded', succeeded_at = now() WHERE order_id = $1", orderID)
	require.EqualValues(t, refund["amountMinor"], sales()["refundedMinor"])
}
