package handlers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
)

func (b *roomBundle) holdBest(t *testing.T, buyer, admission, eventID, key string, body map[string]any) response {
	t.Helper()
	h := bearer(buyer)
	h["X-Admission-Token"] = admission
	h["Idempotency-Key"] = key
	return b.do(t, http.MethodPost, "/v1/events/"+eventID+"/best-available-holds", h, body)
}

// seatLabels are the labels of a best-available hold's answer.
func seatLabels(t *testing.T, res response) []string {
	t.Helper()
	var out []string
	for _, s := range res.json(t)["seats"].([]any) {
		out = append(out, s.(map[string]any)["label"].(string))
	}
	return out
}

// Best available through the API, every answer checked against
// openapi.yaml: the organizer's row score decides, a retry answers the
// same seats, the presale's rules apply (code, categories, the code's
// seats), too many seats is 409 not-enough-seats, an unknown category a
// 422, and named seats under the same key a conflict.
func TestBestAvailableThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{})
	org := b.organizerWithID(t)
	ev := b.presaleEvent(t, org)

	res := b.do(t, http.MethodPut, "/v1/events/"+ev.id+"/seat-scores", bearer(org), map[string]any{"scores": []any{
		map[string]any{"section": "Stalls", "row": "A", "score": 5},
		map[string]any{"seatId": ev.floor[0], "score": -1},
	}})
	require.Equal(t, http.StatusNoContent, res.status, "%s", res.body)
	res = b.do(t, http.MethodPut, "/v1/events/"+ev.id+"/seat-scores", bearer(b.organizerWithID(t)), map[string]any{"scores": []any{
		map[string]any{"section": "Stalls", "row": "A", "score": 5},
	}})
	require.Equal(t, http.StatusNotFound, res.status, "another organizer's event does not exist: %s", res.body)
	res = b.do(t, http.MethodPut, "/v1/events/"+ev.id+"/seat-scores", bearer(org), map[string]any{"scores": []any{
		map[string]any{"section": "Stalls", "row": "Q", "score": 5},
	}})
	require.Equal(t, http.StatusUnprocessableEntity, res.status, "a row of no seat: %s", res.body)

	now := time.Now().UTC()
	res = b.setPhases(t, org, ev.id,
		map[string]any{"name": "presale", "opensAt": now.Add(-time.Hour), "presale": true, "categoryIds": []string{ev.floorCat}},
		map[string]any{"name": "general", "opensAt": now.Add(time.Hour), "presale": false})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	codes := b.createCodes(t, org, ev.id, map[string]any{"phase": "presale", "count": 1, "maxUses": 2, "maxSeats": 2})

	_, a := b.buyer(t)
	res = b.join(t, a, ev.id, codes[0])
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	admA := b.remember(res.json(t)["admissionToken"].(string))

	res = b.holdBest(t, a, admA, ev.id, uuid.NewString(), map[string]any{"categoryId": ev.balcCat, "quantity": 1})
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	require.Equal(t, handlers.TypePhaseCategory, problemType(t, res), "the presale sells Floor only")
	res = b.holdBest(t, a, admA, ev.id, uuid.NewString(), map[string]any{"categoryId": ev.floorCat, "quantity": 3})
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	require.Equal(t, handlers.TypePresaleSeatLimit, problemType(t, res), "the code allows 2 seats")
	res = b.holdBest(t, a, admA, ev.id, uuid.NewString(), map[string]any{"categoryId": uuid.NewString(), "quantity": 1})
	require.Equal(t, http.StatusUnprocessableEntity, res.status, "%s", res.body)

	key := uuid.NewString()
	res = b.holdBest(t, a, admA, ev.id, key, map[string]any{"categoryId": ev.floorCat, "quantity": 2, "adjacentOnly": true})
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	require.Equal(t, []string{"A-2", "A-3"}, seatLabels(t, res), "A-1 scores below the rest of its row")
	first := res.json(t)
	again := b.holdBest(t, a, admA, ev.id, key, map[string]any{"categoryId": ev.floorCat, "quantity": 2, "adjacentOnly": true})
	require.Equal(t, http.StatusAccepted, again.status, "%s", again.body)
	require.Equal(t, first["orderId"], again.json(t)["orderId"])
	require.Equal(t, first["seats"], again.json(t)["seats"])
	res = b.hold(t, a, admA, ev.id, key, ev.floor[0])
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	require.Equal(t, handlers.TypeIdempotencyConflict, problemType(t, res))

	// A buyer without a code cannot hold in the presale.
	_, early := b.buyer(t)
	res = b.setPhases(t, org, ev.id,
		map[string]any{"name": "presale", "opensAt": now.Add(-time.Hour), "presale": true, "categoryIds": []string{ev.floorCat}},
		map[string]any{"name": "general", "opensAt": now.Add(-time.Minute), "presale": false})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res = b.join(t, early, ev.id, "")
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	admEarly := b.remember(res.json(t)["admissionToken"].(string))
	// The general sale: one Floor seat is left, two are asked.
	res = b.holdBest(t, early, admEarly, ev.id, uuid.NewString(), map[string]any{"categoryId": ev.floorCat, "quantity": 2})
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	require.Equal(t, handlers.TypeNotEnoughSeats, problemType(t, res))
	res = b.holdBest(t, early, admEarly, ev.id, uuid.NewString(), map[string]any{"categoryId": ev.balcCat, "quantity": 2})
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	require.Equal(t, []string{"A-1", "A-2"}, seatLabels(t, res))
}

// A presale buyer without a code: 403, whichever kind of hold.
func TestBestAvailableNeedsThePresaleCode(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{})
	org := b.organizerWithID(t)
	ev := b.presaleEvent(t, org)
	_, early := b.buyer(t)
	adm := b.admit(t, early, ev.id)
	res := b.setPhases(t, org, ev.id, map[string]any{"name": "presale", "opensAt": time.Now().Add(-time.Hour), "presale": true})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res = b.holdBest(t, early, adm, ev.id, uuid.NewString(), map[string]any{"categoryId": ev.floorCat, "quantity": 1})
	require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
	require.Equal(t, handlers.TypePresaleCodeRequired, problemType(t, res))
}
