package handlers_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
	"boxoffice/testkit/dbtest"
)

func TestCreateEvent(t *testing.T) {
	t.Parallel()

	t.Run("FromSections", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := b.organizer(t)
		ev := b.createEvent(t, org,
			map[string]any{"name": "Floor", "rows": 28, "seatsPerRow": 3, "priceMinor": 9000},
			map[string]any{"name": "Balcony", "rows": 1, "seatsPerRow": 2, "priceMinor": 4000})
		require.Len(t, ev.Seats, 86)

		got := b.do(t, http.MethodGet, "/v1/events/"+ev.ID, nil, nil)
		require.Equal(t, http.StatusOK, got.status)
		body := got.json(t)
		require.Equal(t, "Test Night", body["name"])
		require.Equal(t, "eur", body["currency"])
		require.EqualValues(t, 86, body["seatCount"])
		require.Equal(t, "2027-06-01T19:30:00Z", body["startsAt"])

		seats := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/seats", nil, nil).json(t)["seats"].([]any)
		first := seats[0].(map[string]any)
		require.Equal(t, "Floor", first["section"])
		require.Equal(t, "A-1", first["label"])
		require.EqualValues(t, 9000, first["priceMinor"])
		require.Equal(t, "available", first["status"])
		require.Equal(t, "AB-3", seats[83].(map[string]any)["label"]) // row 28 is AB
		require.Equal(t, "Balcony", seats[85].(map[string]any)["section"])
	})

	t.Run("FromExplicitSeats", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res := b.do(t, http.MethodPost, "/v1/events", bearer(b.organizer(t)), map[string]any{
			"name": "Club", "startsAt": "2027-01-01T20:00:00Z", "currency": "usd",
			"seats": []map[string]any{
				{"section": "Box", "label": "1", "priceMinor": 30000},
				{"section": "Box", "label": "2", "priceMinor": 30000},
				{"section": "Bar", "label": "1", "priceMinor": 1000},
			},
		})
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
		require.Equal(t, "/v1/events/"+res.json(t)["id"].(string), res.header.Get("Location"))
		require.EqualValues(t, 3, dbtest.Count(t, b.pool, "SELECT count(*) FROM seats"))
	})

	t.Run("OneHundredThousandSeatsInOneRequest", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res := b.do(t, http.MethodPost, "/v1/events", bearer(b.organizer(t)), map[string]any{
			"name": "Stadium", "startsAt": "2027-01-01T20:00:00Z", "currency": "usd",
			"sections": []map[string]any{{"name": "Field", "rows": 100, "seatsPerRow": 1000, "priceMinor": 5000}},
		})
		require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
		require.EqualValues(t, 100_000, dbtest.Count(t, b.pool, "SELECT count(*) FROM seats"))
	})

	t.Run("FirstUseCreatesTheOrganizer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := b.organizer(t)
		b.createEvent(t, org)
		b.createEvent(t, org)
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM organizers"))
		require.EqualValues(t, 2, dbtest.Count(t, b.pool, "SELECT count(*) FROM events"))
	})

	t.Run("BadInputWritesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := b.organizer(t)
		_, buyer := b.buyer(t)
		base := func() map[string]any {
			return map[string]any{"name": "X", "startsAt": "2027-01-01T20:00:00Z", "currency": "usd"}
		}
		with := func(k string, v any) map[string]any { m := base(); m[k] = v; return m }
		section := map[string]any{"name": "A", "rows": 1, "seatsPerRow": 1, "priceMinor": 1}
		cases := []struct {
			name    string
			headers map[string]string
			body    any
			status  int
			typ     string
		}{
			{"NoBearer", nil, with("sections", []any{section}), 401, handlers.TypeUnauthorized},
			{"BuyerCannotCreate", bearer(buyer), with("sections", []any{section}), 403, handlers.TypeForbidden},
			{"NeitherSectionsNorSeats", bearer(org), base(), 422, handlers.TypeValidation},
			{"BothSectionsAndSeats", bearer(org), func() map[string]any {
				m := with("sections", []any{section})
				m["seats"] = []any{map[string]any{"section": "A", "label": "9", "priceMinor": 1}}
				return m
			}(), 422, handlers.TypeValidation},
			{"DuplicateSeatLabels", bearer(org), with("seats", []any{
				map[string]any{"section": "A", "label": "1", "priceMinor": 1},
				map[string]any{"section": "A", "label": "1", "priceMinor": 1},
			}), 422, handlers.TypeValidation},
			{"DuplicateSectionNames", bearer(org), with("sections", []any{section, section}), 422, handlers.TypeValidation},
			{"TooManySeats", bearer(org), with("sections", []any{map[string]any{"name": "A", "rows": 1000, "seatsPerRow": 101, "priceMinor": 1}}), 422, handlers.TypeValidation},
			{"NegativePrice", bearer(org), with("sections", []any{map[string]any{"name": "A", "rows": 1, "seatsPerRow": 1, "priceMinor": -1}}), 422, handlers.TypeValidation},
			{"BadCurrency", bearer(org), func() map[string]any { m := with("sections", []any{section}); m["currency"] = "EURO"; return m }(), 422, handlers.TypeValidation},
			{"MissingName", bearer(org), func() map[string]any { m := with("sections", []any{section}); delete(m, "name"); return m }(), 422, handlers.TypeValidation},
			{"MalformedJSON", bearer(org), `{"name":`, 400, handlers.TypeMalformed},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				res := b.do(t, http.MethodPost, "/v1/events", tc.headers, tc.body)
				require.Equal(t, tc.status, res.status, "%s", res.body)
				require.Equal(t, tc.typ, problemType(t, res))
			})
		}
		for _, table := range []string{"organizers", "events", "seats"} {
			require.EqualValues(t, 0, dbtest.Count(t, b.pool, "SELECT count(*) FROM "+table), table)
		}
	})
}

func TestGetUnknownEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, path := range []string{"/v1/events/" + uuid.NewString(), "/v1/events/" + uuid.NewString() + "/seats"} {
		res := b.do(t, http.MethodGet, path, nil, nil)
		require.Equal(t, http.StatusNotFound, res.status)
		require.Equal(t, handlers.TypeNotFound, problemType(t, res))
	}
	res := b.do(t, http.MethodGet, "/v1/events/not-a-uuid", nil, nil)
	require.Equal(t, http.StatusUnprocessableEntity, res.status)
	_, buyer := b.buyer(t)
	res = b.do(t, http.MethodPost, fmt.Sprintf("/v1/events/%s/waiting-room", uuid.New()), bearer(buyer), nil)
	require.Equal(t, http.StatusNotFound, res.status)
}

func TestSeatMapShowsHeldSeats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := b.createEvent(t, b.organizer(t))
	_, tok := b.buyer(t)
	require.Equal(t, http.StatusAccepted, b.hold(t, tok, b.admit(t, tok, ev.ID), ev.ID, "k", ev.Seats[1]).status)
	status := func() []any {
		var out []any
		for _, s := range b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/seats", nil, nil).json(t)["seats"].([]any)[:3] {
			out = append(out, s.(map[string]any)["status"])
		}
		return out
	}
	require.Equal(t, []any{"available", "held", "available"}, status())
	dbtest.Exec(t, b.pool, "UPDATE holds SET expires_at = now() - interval '1 second'")
	require.Equal(t, []any{"available", "available", "available"}, status(), "an expired hold is shown as available")
}
