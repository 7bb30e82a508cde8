package handlers_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/testkit/dbtest"
)

// A buyer lists their own orders, newest first, across events, page by
// page, filtered by event and status, each as GET /v1/orders/{id} shows
// it; nobody else's order is ever in the list.
func TestListOrders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org := b.organizer(t)
	ev1, ev2 := b.createEvent(t, org), b.createEvent(t, org)
	_, buyer := b.buyer(t)
	_, other := b.buyer(t)
	var ids []string // oldest first
	for i, ev := range []event{ev1, ev2, ev1} {
		res := b.hold(t, buyer, b.admit(t, buyer, ev.ID), ev.ID, uuid.NewString(), ev.Seats[i])
		require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
		ids = append(ids, res.json(t)["orderId"].(string))
	}
	res := b.hold(t, other, b.admit(t, other, ev1.ID), ev1.ID, "k", ev1.Seats[10])
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	secret := b.withPayment(t, ids[2])
	dbtest.Exec(t, b.pool, `INSERT INTO payments (order_id, provider, payment_intent_id, client_secret, status, amount_minor, currency)
		VALUES ($1, 'sandbox', 'pi_test_paid', $2, 'succeeded', 5000, 'eur')`, ids[0], b.remember("pi_test_paid_secret_"+uuid.NewString()[:12]))
	b.setOrderStatus(t, ids[0], "ticketed")

	list := func(tok, query string) (orders []map[string]any, next string) {
		t.Helper()
		res := b.do(t, http.MethodGet, "/v1/orders"+query, bearer(tok), nil)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		body := res.json(t)
		for _, o := range body["orders"].([]any) {
			orders = append(orders, o.(map[string]any))
		}
		next, _ = body["nextCursor"].(string)
		return orders, next
	}
	idsOf := func(orders []map[string]any) (out []string) {
		for _, o := range orders {
			out = append(out, o["id"].(string))
		}
		return out
	}

	all, next := list(buyer, "")
	require.Equal(t, []string{ids[2], ids[1], ids[0]}, idsOf(all))
	require.Empty(t, next)
	require.Equal(t, secret, all[0]["payment"].(map[string]any)["clientSecret"], "pending: the secret is shown")
	require.NotContains(t, all[2]["payment"].(map[string]any), "clientSecret", "ticketed: it is not")
	require.Len(t, all[0]["hold"].(map[string]any)["seatIds"], 1)

	first, next := list(buyer, "?limit=2")
	require.Equal(t, []string{ids[2], ids[1]}, idsOf(first))
	require.NotEmpty(t, next)
	rest, next := list(buyer, "?limit=2&cursor="+url.QueryEscape(next))
	require.Equal(t, []string{ids[0]}, idsOf(rest))
	require.Empty(t, next)

	byEvent, _ := list(buyer, "?eventId="+ev1.ID)
	require.Equal(t, []string{ids[2], ids[0]}, idsOf(byEvent))
	byStatus, _ := list(buyer, "?status=ticketed,refunded")
	require.Equal(t, []string{ids[0]}, idsOf(byStatus))
	theirs, _ := list(other, "")
	require.Len(t, theirs, 1)
	require.NotContains(t, ids, theirs[0]["id"])

	for _, bad := range []string{"?status=shipped", "?cursor=not-a-cursor", "?eventId=nope", "?limit=1000"} {
		res := b.do(t, http.MethodGet, "/v1/orders"+bad, bearer(buyer), nil)
		require.Equal(t, http.StatusUnprocessableEntity, res.status, "%s: %s", bad, res.body)
	}
	require.Equal(t, http.StatusUnauthorized, b.do(t, http.MethodGet, "/v1/orders", nil, nil).status)
}

// An organizer lists their events, and sees each one's sales and orders;
// another organizer's event does not exist for them.
func TestOrganizerViews(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org, _ := b.organizerOf(t)
	otherOrg, _ := b.organizerOf(t)
	ev := b.createEvent(t, org, map[string]any{"name": "Floor", "rows": 1, "seatsPerRow": 10, "priceMinor": 5000})
	ev2 := b.createEvent(t, org)
	theirs := b.createEvent(t, otherOrg)

	res := b.do(t, http.MethodGet, "/v1/events?limit=1", bearer(org), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	page1 := res.json(t)
	require.Equal(t, ev.ID, page1["events"].([]any)[0].(map[string]any)["id"])
	res = b.do(t, http.MethodGet, "/v1/events?limit=1&cursor="+url.QueryEscape(page1["nextCursor"].(string)), bearer(org), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Equal(t, ev2.ID, res.json(t)["events"].([]any)[0].(map[string]any)["id"])
	res = b.do(t, http.MethodGet, "/v1/events", bearer(otherOrg), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Len(t, res.json(t)["events"], 1)

	// Four orders of one seat each: pending, ticketed, refunded, failed.
	buyerID, buyer := b.buyer(t)
	var ids []string
	for i := range 4 {
		res := b.hold(t, buyer, b.admit(t, buyer, ev.ID), ev.ID, uuid.NewString(), ev.Seats[i])
		require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
		ids = append(ids, res.json(t)["orderId"].(string))
	}
	b.setOrderStatus(t, ids[1], "ticketed")
	b.setOrderStatus(t, ids[2], "refunded")
	for i, revoked := range map[int]bool{1: false, 2: true} {
		dbtest.Exec(t, b.pool, `INSERT INTO tickets (id, order_id, seat_id, event_id, revoked_at)
			SELECT $1, $2, id, event_id, CASE WHEN $4 THEN now() END FROM seats WHERE id = $3`, uuid.New(), ids[i], ev.Seats[i], revoked)
		dbtest.Exec(t, b.pool, "UPDATE hold_seats SET released_at = now() WHERE seat_id = $1", ev.Seats[i])
	}
	b.setOrderStatus(t, ids[3], "failed")
	dbtest.Exec(t, b.pool, "UPDATE hold_seats SET released_at = now() WHERE seat_id = $1", ev.Seats[3])

	res = b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/sales", bearer(org), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	sales := res.json(t)
	require.Equal(t, map[string]any{"total": 10.0, "available": 7.0, "held": 1.0, "sold": 1.0, "refunded": 1.0, "blocked": 0.0}, sales["seats"])
	byStatus := sales["ordersByStatus"].(map[string]any)
	require.Len(t, byStatus, 9, "every status is listed")
	require.Equal(t, map[string]float64{"pending_payment": 1, "ticketed": 1, "refunded": 1, "failed": 1},
		nonZero(byStatus))
	require.EqualValues(t, 10000, sales["grossMinor"])
	require.EqualValues(t, 5000, sales["refundedMinor"])
	require.EqualValues(t, 5000, sales["netMinor"])
	require.Equal(t, "eur", sales["currency"])

	res = b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/orders?status=ticketed,failed", bearer(org), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	orders := res.json(t)["orders"].([]any)
	require.Len(t, orders, 2)
	require.Equal(t, ids[3], orders[0].(map[string]any)["id"], "newest first")
	require.Equal(t, buyerID.String(), orders[0].(map[string]any)["buyerId"])
	require.EqualValues(t, 1, orders[0].(map[string]any)["seatCount"])
	res = b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/orders?limit=3&buyerId="+uuid.NewString(), bearer(org), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Empty(t, res.json(t)["orders"])

	for _, path := range []string{"/sales", "/orders"} {
		res := b.do(t, http.MethodGet, "/v1/events/"+theirs.ID+path, bearer(org), nil)
		require.Equal(t, http.StatusNotFound, res.status, "%s: %s", path, res.body)
		res = b.do(t, http.MethodGet, "/v1/events/"+ev.ID+path, bearer(otherOrg), nil)
		require.Equal(t, http.StatusNotFound, res.status, "%s: %s", path, res.body)
		_, buyer := b.buyer(t)
		require.Equal(t, http.StatusForbidden, b.do(t, http.MethodGet, "/v1/events/"+ev.ID+path, bearer(buyer), nil).status)
		require.Equal(t, http.StatusUnauthorized, b.do(t, http.MethodGet, "/v1/events/"+ev.ID+path, nil, nil).status)
	}
	for _, bad := range []string{"/orders?status=nope", "/orders?buyerId=x", "/orders?cursor=notacursor"} {
		res := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+bad, bearer(org), nil)
		require.Equal(t, http.StatusUnprocessableEntity, res.status, "%s: %s", bad, res.body)
	}
}

func nonZero(m map[string]any) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if v.(float64) != 0 {
			out[k] = v.(float64)
		}
	}
	return out
}
