package handlers_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/boxoffice/boxoffice/client"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/auth"
)

// The Go client's cursor iteration against the real handlers (and the
// contract, which validating checks every answer against): AllEvents
// follows nextCursor through every page of an organizer's events and
// stops after the last.
func TestClientAllEventsFollowsTheServersCursor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	api, err := client.NewClientWithResponses(b.srv.URL, client.WithHTTPClient(b.srv.Client()))
	require.NoError(t, err)
	org := uuid.New()
	bearer := client.WithBearer(b.token(t, auth.Identity{UserID: org, Role: auth.RoleOrganizer, OrganizerID: org}))

	var created []string
	for i := range 5 {
		res, err := api.CreateEventWithResponse(t.Context(), nil, client.CreateEventJSONRequestBody{
			Name: fmt.Sprintf("paged %d", i), StartsAt: time.Date(2030, 1, 1, 20, 0, 0, 0, time.UTC), Currency: "eur",
			Sections: []client.SectionInput{{Name: "A", Rows: 1, SeatsPerRow: 2, PriceMinor: 1000}},
		}, bearer)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, res.StatusCode(), "%s", res.Body)
		created = append(created, res.JSON201.ID)
	}

	limit := int64(2)
	first, err := api.ListEventsWithResponse(t.Context(), &client.ListEventsParams{Limit: &limit}, bearer)
	require.NoError(t, err)
	require.Len(t, first.JSON200.Events, 2)
	require.NotNil(t, first.JSON200.NextCursor, "five events in pages of two: the first page is not the last")

	var listed []string
	for ev, err := range api.AllEvents(t.Context(), client.ListEventsParams{Limit: &limit}, bearer) {
		require.NoError(t, err)
		listed = append(listed, ev.ID)
	}
	require.Equal(t, created, listed, "every event once, oldest first, across three pages")

	// From the first page's cursor on: the three events after it.
	listed = listed[:0]
	for ev, err := range api.AllEvents(t.Context(), client.ListEventsParams{Limit: &limit, Cursor: first.JSON200.NextCursor}, bearer) {
		require.NoError(t, err)
		listed = append(listed, ev.ID)
	}
	require.Equal(t, created[2:], listed)
}
