package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"

	"github.com/boxoffice/boxoffice/client"
)

// The client's tests use the standard library's testing only: testify
// would be a requirement of the module every user downloads.

// Every error status, documented or not, decodes into the one problem
// field: the overlay folded the per-status fields into it.
func TestErrorStatusesFoldIntoOneProblem(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusNotFound, http.StatusConflict, http.StatusBadGateway} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.Header().Set("Retry-After", "3")
				w.WriteHeader(status)
				_, _ = w.Write([]byte(`{"type":"/problems/seat-unavailable","title":"Conflict","status":409,"seatIds":["A-1"]}`))
			}))
			t.Cleanup(srv.Close)
			api, err := client.NewClientWithResponses(srv.URL, client.WithHTTPClient(srv.Client()))
			if err != nil {
				t.Fatal(err)
			}
			res, err := api.GetEventWithResponse(context.Background(), uuid.New(), nil)
			if err != nil {
				t.Fatalf("status %d: %v", status, err)
			}
			if res.JSON200 != nil || res.ApplicationProblemJSONDefault == nil {
				t.Fatalf("status %d: JSON200 %v, problem %v", status, res.JSON200, res.ApplicationProblemJSONDefault)
			}
			if p := res.ApplicationProblemJSONDefault; p.Type != "/problems/seat-unavailable" || len(p.SeatIds) != 1 {
				t.Fatalf("status %d: problem %+v", status, p)
			}
			if p := client.ProblemOf(res.HTTPResponse, res.Body); p.Type != "/problems/seat-unavailable" {
				t.Fatalf("status %d: ProblemOf %+v", status, p)
			}
			if d := client.RetryAfter(res.HTTPResponse); d.Seconds() != 3 {
				t.Fatalf("status %d: Retry-After %v", status, d)
			}
		})
	}
}
