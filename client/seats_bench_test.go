package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"

	"github.com/boxoffice/boxoffice/client"
)

// seatMapServer answers GET /v1/events/{id}/seats with a map of n seats
// shaped as the API's (SeatBody: five fields each).
func seatMapServer(b *testing.B, n int) *httptest.Server {
	b.Helper()
	seats := make([]client.SeatBody, n)
	for i := range seats {
		seats[i] = client.SeatBody{ID: uuid.NewString(), Label: fmt.Sprintf("%c-%d", 'A'+i/20%26, i%20+1),
			Section: "Stalls", PriceMinor: 8500, Status: client.SeatBodyStatusAvailable}
	}
	raw, err := json.Marshal(client.SeatsOutputBody{Seats: seats})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("ETag", `"v1"`)
		_, _ = w.Write(raw)
	}))
	b.Cleanup(srv.Close)
	b.SetBytes(int64(len(raw)))
	return srv
}

// BenchmarkListSeats is what reading a seat map costs a caller: through
// the generated ListSeatsWithResponse (the whole body read, then decoded
// into SeatBody), against the hand-written client it replaced (the body
// decoded as it streams into two of the five fields). Run with
// go test -run '^$' -bench ListSeats -benchmem ./client/.
func BenchmarkListSeats(b *testing.B) {
	for _, n := range []int{100, 5000} {
		b.Run(fmt.Sprintf("Generated/%d", n), func(b *testing.B) {
			srv := seatMapServer(b, n)
			api, err := client.NewClientWithResponses(srv.URL, client.WithHTTPClient(srv.Client()))
			if err != nil {
				b.Fatal(err)
			}
			event := uuid.New()
			b.ReportAllocs()
			for b.Loop() {
				res, err := api.ListSeatsWithResponse(context.Background(), event, nil)
				if err != nil || res.JSON200 == nil || len(res.JSON200.Seats) != n {
					b.Fatalf("list seats: %v", err)
				}
			}
		})
		b.Run(fmt.Sprintf("HandDecoded/%d", n), func(b *testing.B) {
			srv := seatMapServer(b, n)
			hc := srv.Client()
			url := srv.URL + "/v1/events/" + uuid.NewString() + "/seats"
			b.ReportAllocs()
			for b.Loop() {
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
				res, err := hc.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				var m struct {
					Seats []struct {
						ID     string `json:"id"`
						Status string `json:"status"`
					} `json:"seats"`
				}
				err = json.NewDecoder(res.Body).Decode(&m)
				res.Body.Close()
				if err != nil || len(m.Seats) != n {
					b.Fatalf("decode: %v", err)
				}
			}
		})
	}
}
