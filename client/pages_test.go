package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/boxoffice/boxoffice/client"
)

// pagedEvents serves GET /v1/events as the contract pages it: limit
// events from the one at the cursor (an index here; opaque to clients),
// nextCursor while there are more. A page at failAt answers a 503
// problem; stuck makes every nextCursor the cursor asked with. It
// counts the requests in asked.
func pagedEvents(t *testing.T, n, failAt int, stuck bool) (*client.ClientWithResponses, *atomic.Int32) {
	t.Helper()
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		if r.URL.Path != "/v1/events" {
			http.NotFound(w, r)
			return
		}
		from, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		if from == failAt {
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"type":"/problems/cell-unavailable","status":503,"detail":"try again"}`))
			return
		}
		page := client.ListEventsOutputBody{Events: []client.EventBody{}}
		for i := from; i < min(from+limit, n); i++ {
			page.Events = append(page.Events, client.EventBody{Name: "event " + strconv.Itoa(i)})
		}
		if from+limit < n {
			next := strconv.Itoa(from + limit)
			if stuck {
				next = r.URL.Query().Get("cursor")
			}
			page.NextCursor = &next
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(page)
	}))
	t.Cleanup(srv.Close)
	api, err := client.NewClientWithResponses(srv.URL, client.WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	return api, &asked
}

func TestAllFollowsNextCursor(t *testing.T) {
	t.Parallel()

	t.Run("YieldsEveryPageInOrderThenStops", func(t *testing.T) {
		t.Parallel()
		api, asked := pagedEvents(t, 5, -1, false)
		limit := int64(2)
		params := client.ListEventsParams{Limit: &limit}
		var names []string
		for ev, err := range api.AllEvents(context.Background(), params) {
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, ev.Name)
		}
		want := []string{"event 0", "event 1", "event 2", "event 3", "event 4"}
		if len(names) != len(want) {
			t.Fatalf("got %v, want %v", names, want)
		}
		for i := range want {
			if names[i] != want[i] {
				t.Fatalf("got %v, want %v", names, want)
			}
		}
		if n := asked.Load(); n != 3 {
			t.Fatalf("%d requests for 3 pages", n)
		}
		if params.Cursor != nil {
			t.Fatal("the caller's params moved")
		}
	})

	t.Run("StartsAtTheGivenCursor", func(t *testing.T) {
		t.Parallel()
		api, _ := pagedEvents(t, 5, -1, false)
		limit, cursor := int64(2), "3"
		var names []string
		for ev, err := range api.AllEvents(context.Background(), client.ListEventsParams{Limit: &limit, Cursor: &cursor}) {
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, ev.Name)
		}
		if len(names) != 2 || names[0] != "event 3" || names[1] != "event 4" {
			t.Fatalf("got %v", names)
		}
	})

	t.Run("BreakAsksForNoMorePages", func(t *testing.T) {
		t.Parallel()
		api, asked := pagedEvents(t, 5, -1, false)
		limit := int64(2)
		for _, err := range api.AllEvents(context.Background(), client.ListEventsParams{Limit: &limit}) {
			if err != nil {
				t.Fatal(err)
			}
			break
		}
		if n := asked.Load(); n != 1 {
			t.Fatalf("%d requests after a break on the first item", n)
		}
	})

	t.Run("ErrorAnswerEndsWithItsProblem", func(t *testing.T) {
		t.Parallel()
		api, asked := pagedEvents(t, 5, 2, false)
		limit := int64(2)
		var items int
		var last error
		for _, err := range api.AllEvents(context.Background(), client.ListEventsParams{Limit: &limit}) {
			if err != nil {
				last = err
				continue
			}
			items++
		}
		var se *client.StatusError
		if !errors.As(last, &se) {
			t.Fatalf("got %v, want a *client.StatusError", last)
		}
		if items != 2 || se.StatusCode != http.StatusServiceUnavailable || se.Problem.Type != "/problems/cell-unavailable" || se.RetryAfter.Seconds() != 2 {
			t.Fatalf("items %d, error %+v", items, se)
		}
		if n := asked.Load(); n != 2 {
			t.Fatalf("%d requests, want 2 (the second failed)", n)
		}
	})

	t.Run("StuckCursorEnds", func(t *testing.T) {
		t.Parallel()
		api, asked := pagedEvents(t, 5, -1, true)
		limit, cursor := int64(2), "0"
		var last error
		for _, err := range api.AllEvents(context.Background(), client.ListEventsParams{Limit: &limit, Cursor: &cursor}) {
			if err != nil {
				last = err
			}
		}
		if !errors.Is(last, client.ErrCursorStuck) || asked.Load() != 1 {
			t.Fatalf("error %v after %d requests", last, asked.Load())
		}
	})
}
