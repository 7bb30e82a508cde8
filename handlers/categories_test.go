package handlers_test

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
)

// An event created with price categories: the seat map names each seat's
// category and lists the categories, a hold is priced from them, and the
// sales report breaks the seats down by them. Every response is checked
// against openapi.yaml (contract_test.go).
func TestPriceCategoriesThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org, _ := b.organizerOf(t)
	res := b.do(t, http.MethodPost, "/v1/events", bearer(org), map[string]any{
		"name": "Categories", "startsAt": "2027-01-01T20:00:00Z", "currency": "eur",
		"categories": []map[string]any{
			{"name": "Floor", "priceMinor": 9000, "seatLimit": 4},
			{"name": "Balcony front", "priceMinor": 4000},
		},
		"sections": []map[string]any{
			{"name": "Stalls", "rows": 1, "seatsPerRow": 3, "priceMinor": 9000, "category": "Floor"},
			{"name": "Balcony", "rows": 1, "seatsPerRow": 2, "priceMinor": 4000, "category": "Balcony front"},
		},
	})
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	eventID := res.json(t)["id"].(string)

	m := b.do(t, http.MethodGet, "/v1/events/"+eventID+"/seats", nil, nil).json(t)
	cats := m["categories"].([]any)
	require.Len(t, cats, 2)
	require.Equal(t, "Floor", cats[0].(map[string]any)["name"])
	require.EqualValues(t, 4, cats[0].(map[string]any)["seatLimit"])
	seats := m["seats"].([]any)
	balcony := seats[3].(map[string]any)
	require.Equal(t, "Balcony front", balcony["category"])
	require.Equal(t, cats[1].(map[string]any)["id"], balcony["categoryId"])
	require.EqualValues(t, 4000, balcony["priceMinor"])

	_, buyer := b.buyer(t)
	res = b.hold(t, buyer, b.admit(t, buyer, eventID), eventID, uuid.NewString(),
		seats[0].(map[string]any)["id"].(string), balcony["id"].(string))
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	order := b.do(t, http.MethodGet, "/v1/orders/"+res.json(t)["orderId"].(string), bearer(buyer), nil).json(t)
	require.EqualValues(t, 13000, order["amountMinor"])

	res = b.do(t, http.MethodGet, "/v1/events/"+eventID+"/sales", bearer(org), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	by := res.json(t)["byCategory"].([]any)
	require.Len(t, by, 2)
	require.Equal(t, "Balcony front", by[1].(map[string]any)["name"])
	require.Equal(t, map[string]any{"total": 2.0, "available": 1.0, "held": 1.0, "sold": 0.0, "refunded": 0.0, "blocked": 0.0},
		by[1].(map[string]any)["seats"])

	t.Run("CategoryMustPriceItsSeats", func(t *testing.T) {
		res := b.do(t, http.MethodPost, "/v1/events", bearer(org), map[string]any{
			"name": "Bad", "startsAt": "2027-01-01T20:00:00Z", "currency": "eur",
			"categories": []map[string]any{{"name": "Floor", "priceMinor": 9000}},
			"sections":   []map[string]any{{"name": "Stalls", "rows": 1, "seatsPerRow": 3, "priceMinor": 1, "category": "Floor"}},
		})
		require.Equal(t, http.StatusUnprocessableEntity, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeValidation, problemType(t, res))
	})
}
