// Package bench measures the hold path over HTTP and sets it beside the
// seed's hold transaction run as bare SQL by pgbench on the same server, in
// the same run, so the figures can be read as ratios on a noisy machine.
package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/auth"
	"boxoffice/testkit/apiclient"
)

// Client drives the API like many buyers at once.
type Client struct {
	BaseURL   string
	JWTSecret []byte
	HTTP      *http.Client
	// Stream opens order event streams.
	Stream *http.Client
}

// NewClient returns a Client whose connection pool fits conns concurrent
// buyers.
func NewClient(baseURL string, jwtSecret []byte, conns int) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = conns * 2
	tr.MaxIdleConnsPerHost = conns * 2
	// Streams stay open for a whole purchase: they get a client of their
	// own, without the requests' timeout.
	str := http.DefaultTransport.(*http.Transport).Clone()
	str.MaxIdleConns, str.MaxIdleConnsPerHost = conns, conns
	return &Client{BaseURL: baseURL, JWTSecret: jwtSecret,
		HTTP: &http.Client{Transport: tr, Timeout: 30 * time.Second}, Stream: &http.Client{Transport: str}}
}

// do sends one API request; headers carry the bearer token. It returns an
// error only when no answer arrived or a 2xx answer did not decode into
// out.
func (c *Client) do(ctx context.Context, method, path string, headers map[string]string, body any, out any) (int, error) {
	api := apiclient.Client{BaseURL: c.BaseURL, HTTP: c.HTTP}
	res, err := api.Do(ctx, method, path, "", headers, body, out)
	return res.Status, err
}

// Event is an event created for a benchmark, with its seat ids in layout
// order.
type Event struct {
	ID       string
	Seats    []string
	Creation time.Duration // how long POST /v1/events took
}

// CreateEvent creates an event of rows × seatsPerRow seats in one request.
func (c *Client) CreateEvent(ctx context.Context, rows, seatsPerRow int) (Event, error) {
	org, err := auth.Mint(c.JWTSecret, auth.Identity{UserID: uuid.New(), Role: auth.RoleOrganizer, OrganizerID: uuid.New()}, time.Hour)
	if err != nil {
		return Event{}, err
	}
	body := map[string]any{
		"name": "Bench", "startsAt": time.Now().Add(24 * time.Hour).UTC(), "currency": "eur",
		"sections": []map[string]any{{"name": "Floor", "rows": rows, "seatsPerRow": seatsPerRow, "priceMinor": 5000}},
	}
	var ev struct{ ID string }
	start := time.Now()
	status, err := c.do(ctx, http.MethodPost, "/v1/events", map[string]string{"Authorization": "Bearer " + org}, body, &ev)
	took := time.Since(start)
	if err != nil || status != http.StatusCreated {
		return Event{}, fmt.Errorf("create event: status %d: %v", status, err)
	}
	var seats struct{ Seats []struct{ ID string } }
	if status, err := c.do(ctx, http.MethodGet, "/v1/events/"+ev.ID+"/seats", nil, nil, &seats); err != nil || status != http.StatusOK {
		return Event{}, fmt.Errorf("list seats: status %d: %v", status, err)
	}
	out := Event{ID: ev.ID, Creation: took}
	for _, s := range seats.Seats {
		out.Seats = append(out.Seats, s.ID)
	}
	return out, nil
}

type buyer struct {
	bearer, admission string
}

func (c *Client) newBuyer(ctx context.Context, eventID string) (buyer, error) {
	tok, err := auth.Mint(c.JWTSecret, auth.Identity{UserID: uuid.New(), Role: auth.RoleBuyer}, time.Hour)
	if err != nil {
		return buyer{}, err
	}
	var adm struct{ AdmissionToken string }
	path := "/v1/events/" + eventID + "/waiting-room"
	headers := map[string]string{"Authorization": "Bearer " + tok}
	status, err := c.do(ctx, http.MethodPost, path, headers, nil, &adm)
	// Queued (the release controller admits fewer than arrive): wait in
	// line as a buyer does, polling.
	for deadline := time.Now().Add(time.Minute); err == nil && status == http.StatusAccepted && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		status, err = c.do(ctx, http.MethodGet, path, headers, nil, &adm)
		if status == http.StatusOK && adm.AdmissionToken == "" {
			status = http.StatusAccepted // still queued
		}
	}
	if err != nil || status != http.StatusOK {
		return buyer{}, fmt.Errorf("join waiting room: status %d: %v", status, err)
	}
	return buyer{bearer: tok, admission: adm.AdmissionToken}, nil
}

// HoldResult is what one run of concurrent holds measured.
type HoldResult struct {
	Clients   int
	Elapsed   time.Duration
	Held      int // 202
	Conflicts int // 409 seat-unavailable
	Errors    int // anything else
	P50, P99  time.Duration
}

// HoldsPerSec is successful holds per second.
func (r HoldResult) HoldsPerSec() float64 { return float64(r.Held) / r.Elapsed.Seconds() }

// AttemptsPerSec is answered hold requests (held or conflict) per second.
func (r HoldResult) AttemptsPerSec() float64 {
	return float64(r.Held+r.Conflicts) / r.Elapsed.Seconds()
}

// RunHolds lets clients buyers hold two adjacent seats at random, with a
// fresh Idempotency-Key each time, for d.
func (c *Client) RunHolds(ctx context.Context, ev Event, clients int, d time.Duration) (HoldResult, error) {
	buyers := make([]buyer, clients)
	for i := range buyers {
		var err error
		if buyers[i], err = c.newBuyer(ctx, ev.ID); err != nil {
			return HoldResult{}, err
		}
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		res       = HoldResult{Clients: clients}
		wg        sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	start := time.Now()
	for _, b := range buyers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			var local []time.Duration
			var held, conflicts, errs int
			for time.Now().Before(deadline) && ctx.Err() == nil {
				i := rng.IntN(len(ev.Seats) - 1)
				t0 := time.Now()
				status, err := c.do(ctx, http.MethodPost, "/v1/events/"+ev.ID+"/holds", map[string]string{
					"Authorization":     "Bearer " + b.bearer,
					"X-Admission-Token": b.admission,
					"Idempotency-Key":   uuid.NewString(),
				}, map[string]any{"seatIds": []string{ev.Seats[i], ev.Seats[i+1]}}, nil)
				switch {
				case err == nil && status == http.StatusAccepted:
					held++
					local = append(local, time.Since(t0))
				case err == nil && status == http.StatusConflict:
					conflicts++
				default:
					errs++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			latencies = append(latencies, local...)
			res.Held += held
			res.Conflicts += conflicts
			res.Errors += errs
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	slices.Sort(latencies)
	res.P50, res.P99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
	return res, ctx.Err()
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}
