package handlers_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
)

// The organizer's seat blocks and issued orders through the API; every
// response is checked against openapi.yaml (contract_test.go).
func TestSeatBlocksAndIssuedOrders(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org, _ := b.organizerOf(t)
	other, _ := b.organizerOf(t)
	ev := b.createEvent(t, org, map[string]any{"name": "Floor", "rows": 1, "seatsPerRow": 6, "priceMinor": 5000})
	base := "/v1/events/" + ev.ID

	res := b.do(t, http.MethodPost, base+"/seat-blocks", bearer(org), map[string]any{
		"seatIds": []string{ev.Seats[0], ev.Seats[1]}, "reason": "press", "note": "two for the review",
	})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	blocks := res.json(t)["blocks"].([]any)
	require.Len(t, blocks, 2)
	require.Equal(t, "press", blocks[0].(map[string]any)["reason"])

	seats := b.do(t, http.MethodGet, base+"/seats", nil, nil).json(t)["seats"].([]any)
	require.Equal(t, "sold", seats[0].(map[string]any)["status"], "a blocked seat is unavailable on the seat map")

	_, buyer := b.buyer(t)
	res = b.hold(t, buyer, b.admit(t, buyer, ev.ID), ev.ID, uuid.NewString(), ev.Seats[1])
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	require.Equal(t, handlers.TypeSeatUnavailable, problemType(t, res))
	res = b.hold(t, buyer, b.admit(t, buyer, ev.ID), ev.ID, uuid.NewString(), ev.Seats[2])
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)

	// A held seat cannot be blocked or comped: 409 naming it.
	res = b.do(t, http.MethodPost, base+"/seat-blocks", bearer(org), map[string]any{"seatIds": []string{ev.Seats[2]}, "reason": "kill"})
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	require.Equal(t, handlers.TypeSeatUnavailable, problemType(t, res))
	res = b.do(t, http.MethodPost, base+"/issued-orders", bearer(org), map[string]any{"seatIds": []string{ev.Seats[2]}, "channel": "comp"})
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)

	// A comp of a blocked seat, to a named buyer.
	buyerID := uuid.New()
	res = b.do(t, http.MethodPost, base+"/issued-orders", bearer(org), map[string]any{
		"seatIds": []string{ev.Seats[0]}, "channel": "comp", "buyerId": buyerID.String(),
	})
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	comp := res.json(t)
	require.Equal(t, "paid", comp["status"])
	require.EqualValues(t, 0, comp["amountMinor"])
	// A retry with its Idempotency-Key gets the first answer; without, 409.
	retry := map[string]string{"Authorization": "Bearer " + org, "Idempotency-Key": "box-7"}
	sale := map[string]any{"seatIds": []string{ev.Seats[3]}, "channel": "box_office", "amountMinor": 5000, "reference": "till 1 #7"}
	first := b.do(t, http.MethodPost, base+"/issued-orders", retry, sale)
	require.Equal(t, http.StatusCreated, first.status, "%s", first.body)
	again := b.do(t, http.MethodPost, base+"/issued-orders", retry, sale)
	require.Equal(t, http.StatusCreated, again.status, "%s", again.body)
	require.Equal(t, first.json(t)["orderId"], again.json(t)["orderId"])
	require.Equal(t, http.StatusConflict, b.do(t, http.MethodPost, base+"/issued-orders", bearer(org), sale).status)
	// A box office sale needs its reference.
	res = b.do(t, http.MethodPost, base+"/issued-orders", bearer(org), map[string]any{
		"seatIds": []string{ev.Seats[5]}, "channel": "box_office", "amountMinor": 5000,
	})
	require.Equal(t, http.StatusUnprocessableEntity, res.status, "%s", res.body)

	res = b.do(t, http.MethodGet, base+"/orders?buyerId="+buyerID.String(), bearer(org), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Equal(t, "comp", res.json(t)["orders"].([]any)[0].(map[string]any)["channel"])

	res = b.do(t, http.MethodGet, base+"/sales", bearer(org), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	sales := res.json(t)
	require.EqualValues(t, 1, sales["seats"].(map[string]any)["blocked"])
	require.Equal(t, map[string]any{"online": 1.0, "comp": 1.0, "box_office": 1.0}, sales["ordersByChannel"])
	require.EqualValues(t, 5000, sales["boxOfficeMinor"])

	// The box office sale refunded at the till: its organizer voids it, as
	// a whole, nothing sent to the provider; its seat back on sale.
	saleID := first.json(t)["orderId"].(string)
	res = b.do(t, http.MethodPost, "/v1/orders/"+saleID+"/refund", bearer(org), map[string]any{"ticketIds": []string{uuid.NewString()}})
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	for range 2 {
		res = b.do(t, http.MethodPost, "/v1/orders/"+saleID+"/refund", bearer(org), map[string]any{"resell": true})
		require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
		require.Equal(t, "canceled", res.json(t)["status"])
	}
	res = b.do(t, http.MethodGet, base+"/sales", bearer(org), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.EqualValues(t, 0, res.json(t)["boxOfficeMinor"], "a voided sale took nothing")

	res = b.do(t, http.MethodPost, base+"/seat-blocks/release", bearer(org), map[string]any{"seatIds": []string{ev.Seats[1], ev.Seats[5]}})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Equal(t, []any{ev.Seats[1]}, res.json(t)["released"])
	res = b.do(t, http.MethodGet, base+"/seat-blocks", bearer(org), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Empty(t, res.json(t)["blocks"])

	t.Run("AnotherOrganizerGets404", func(t *testing.T) {
		for _, r := range []struct {
			method, path string
			body         any
		}{
			{http.MethodPost, "/seat-blocks", map[string]any{"seatIds": []string{ev.Seats[4]}, "reason": "kill"}},
			{http.MethodGet, "/seat-blocks", nil},
			{http.MethodPost, "/seat-blocks/release", map[string]any{"seatIds": []string{ev.Seats[4]}}},
			{http.MethodPost, "/issued-orders", map[string]any{"seatIds": []string{ev.Seats[4]}, "channel": "comp"}},
		} {
			res := b.do(t, r.method, base+r.path, bearer(other), r.body)
			require.Equal(t, http.StatusNotFound, res.status, "%s %s: %s", r.method, r.path, res.body)
			require.Equal(t, http.StatusForbidden, b.do(t, r.method, base+r.path, bearer(buyer), r.body).status)
		}
		require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, base+"/issued-orders", bearer(org),
			map[string]any{"seatIds": []string{ev.Seats[4]}, "channel": "comp"}).status, "the seat was untouched")
	})

	t.Run("BadInput", func(t *testing.T) {
		for _, body := range []map[string]any{
			{"seatIds": []string{}, "reason": "kill"},
			{"seatIds": []string{ev.Seats[5]}, "reason": "because"},
			{"seatIds": []string{uuid.NewString()}, "reason": "kill"},
		} {
			res := b.do(t, http.MethodPost, base+"/seat-blocks", bearer(org), body)
			require.Equal(t, http.StatusUnprocessableEntity, res.status, "%v: %s", body, res.body)
		}
	})
}

// Blocking and releasing seats are idempotent by nature (their
// descriptions say so; they take no Idempotency-Key): the same block sent
// by several goroutines at once, as retries of a lost answer, answers the
// same blocks (blockedAt included) every time; the same release sent at
// once releases each seat exactly once across the answers, and leaves
// nothing blocked.
func TestSeatBlocksAreIdempotentByNature(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org, _ := b.organizerOf(t)
	ev := b.createEvent(t, org, map[string]any{"name": "Floor", "rows": 1, "seatsPerRow": 6, "priceMinor": 5000})
	base := "/v1/events/" + ev.ID
	body := map[string]any{"seatIds": []string{ev.Seats[0], ev.Seats[1], ev.Seats[2]}, "reason": "press", "note": "review"}

	first := b.do(t, http.MethodPost, base+"/seat-blocks", bearer(org), body)
	require.Equal(t, http.StatusOK, first.status, "%s", first.body)
	const retries = 6
	res := make([]response, retries)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range retries {
		wg.Go(func() {
			<-start
			res[i] = b.do(t, http.MethodPost, base+"/seat-blocks", bearer(org), body)
		})
	}
	close(start)
	wg.Wait()
	for _, r := range res {
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		require.JSONEq(t, string(first.body), string(r.body), "a retried block answers as the first")
	}

	release := map[string]any{"seatIds": []string{ev.Seats[0], ev.Seats[1], ev.Seats[2]}}
	start = make(chan struct{})
	for i := range retries {
		wg.Go(func() {
			<-start
			res[i] = b.do(t, http.MethodPost, base+"/seat-blocks/release", bearer(org), release)
		})
	}
	close(start)
	wg.Wait()
	released := map[string]int{}
	for _, r := range res {
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		for _, id := range r.json(t)["released"].([]any) {
			released[id.(string)]++
		}
	}
	require.Equal(t, map[string]int{ev.Seats[0]: 1, ev.Seats[1]: 1, ev.Seats[2]: 1}, released, "each seat released once")
	list := b.do(t, http.MethodGet, base+"/seat-blocks", bearer(org), nil)
	require.Equal(t, http.StatusOK, list.status, "%s", list.body)
	require.Empty(t, list.json(t)["blocks"])
}
