// Package bench measures the hold path over HTTP and sets it beside the
// hold transaction of a straightforward implementation run as bare SQL
// (../shared/bench/pgbench-hold.sql) by pgbench on the same server, in
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

	"github.com/boxoffice/boxoffice/client"
	"github.com/google/uuid"

	"boxoffice/platform/auth"
)

// Client drives the API like many buyers at once, through the generated
// client (github.com/boxoffice/boxoffice/client).
type Client struct {
	BaseURL   string
	JWTSecret []byte
	// StripeBase, when set, is the Stripe stand-in (lab/memstripe) the
	// product pays with: buyers confirm their cards there. Unset, they
	// confirm through the sandbox provider's buyer route.
	StripeBase string
	// stripe confirms cards at StripeBase.
	stripe *http.Client
	// api makes the requests, each bounded by 30s.
	api *client.ClientWithResponses
	// stream opens order event streams.
	stream *client.Client
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
	// NewClient and NewClientWithResponses fail only on an option that
	// fails; these do not.
	api, _ := client.NewClientWithResponses(baseURL, client.WithHTTPClient(&http.Client{Transport: tr, Timeout: 30 * time.Second}))
	stream, _ := client.NewClient(baseURL, client.WithHTTPClient(&http.Client{Transport: str}))
	return &Client{BaseURL: baseURL, JWTSecret: jwtSecret, api: api, stream: stream, stripe: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// status is res's HTTP status, or 0 when err says no answer arrived.
func status(res interface{ StatusCode() int }, err error) int {
	if err != nil {
		return 0
	}
	return res.StatusCode()
}

// Event is an event created for a benchmark, with its seat ids in layout
// order.
type Event struct {
	ID       string
	event    uuid.UUID // ID, as the client's path parameters take it
	Seats    []string
	Creation time.Duration // how long POST /v1/events took
	// Category is the id of the event's first price category (the
	// benchmark's events have one): what best-available holds ask for.
	Category string
}

// CreateEvent creates an event of rows × seatsPerRow seats in one request.
func (c *Client) CreateEvent(ctx context.Context, rows, seatsPerRow int) (Event, error) {
	org, err := auth.Mint(c.JWTSecret, auth.Identity{UserID: uuid.New(), Role: auth.RoleOrganizer, OrganizerID: uuid.New()}, time.Hour)
	if err != nil {
		return Event{}, err
	}
	body := client.CreateEventJSONRequestBody{
		Name: "Bench", StartsAt: time.Now().Add(24 * time.Hour).UTC(), Currency: "eur",
		Sections: []client.SectionInput{{Name: "Floor", Rows: int64(rows), SeatsPerRow: int64(seatsPerRow), PriceMinor: 5000}},
	}
	start := time.Now()
	ev, err := c.api.CreateEventWithResponse(ctx, nil, body, client.WithBearer(org))
	took := time.Since(start)
	if err != nil || ev.JSON201 == nil {
		return Event{}, fmt.Errorf("create event: status %d: %v", status(ev, err), err)
	}
	id, err := uuid.Parse(ev.JSON201.ID)
	if err != nil {
		return Event{}, fmt.Errorf("create event: id %q: %w", ev.JSON201.ID, err)
	}
	seats, err := c.api.ListSeatsWithResponse(ctx, id, nil)
	if err != nil || seats.JSON200 == nil {
		return Event{}, fmt.Errorf("list seats: status %d: %v", status(seats, err), err)
	}
	out := Event{ID: ev.JSON201.ID, event: id, Creation: took}
	if len(seats.JSON200.Categories) > 0 {
		out.Category = seats.JSON200.Categories[0].ID
	}
	for _, s := range seats.JSON200.Seats {
		out.Seats = append(out.Seats, s.ID)
	}
	return out, nil
}

type buyer struct {
	auth      client.RequestEditorFn // the buyer's bearer token
	admission string
}

func (c *Client) newBuyer(ctx context.Context, event uuid.UUID) (buyer, error) {
	tok, err := auth.Mint(c.JWTSecret, auth.Identity{UserID: uuid.New(), Role: auth.RoleBuyer}, time.Hour)
	if err != nil {
		return buyer{}, err
	}
	bearer := client.WithBearer(tok)
	// admission is the token of a 200 (a 202, queued, has none), or "".
	admission := func(res interface{ StatusCode() int }, room *client.WaitingRoomBody) string {
		if res.StatusCode() != http.StatusOK || room == nil || room.AdmissionToken == nil {
			return ""
		}
		return *room.AdmissionToken
	}
	joined, err := c.api.JoinWaitingRoomWithResponse(ctx, event, bearer)
	code := status(joined, err)
	var adm string
	if err == nil {
		adm = admission(joined, joined.JSON200)
	}
	// Queued (the release controller admits fewer than arrive): wait in
	// line as a buyer's app does, polling when the room says to
	// (pollAfterSeconds; Retry-After of a 429).
	wait := func(after *int64) time.Duration {
		if after != nil && *after > 0 {
			return time.Duration(*after) * time.Second
		}
		return time.Second
	}
	next := time.Second
	if joined != nil && joined.JSON202 != nil {
		next = wait(joined.JSON202.PollAfterSeconds)
	}
	for deadline := time.Now().Add(time.Minute); err == nil && (code == http.StatusAccepted || code == http.StatusTooManyRequests) && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return buyer{}, ctx.Err()
		case <-time.After(next):
		}
		var polled *client.GetWaitingRoomResponse
		polled, err = c.api.GetWaitingRoomWithResponse(ctx, event, bearer)
		next = time.Second
		if code = status(polled, err); err == nil {
			if polled.JSON202 != nil {
				next = wait(polled.JSON202.PollAfterSeconds)
			}
			if adm = admission(polled, polled.JSON200); code == http.StatusOK && adm == "" {
				code = http.StatusAccepted // still queued
			}
		}
	}
	if err != nil || code != http.StatusOK {
		return buyer{}, fmt.Errorf("join waiting room: status %d: %v", code, err)
	}
	return buyer{auth: bearer, admission: adm}, nil
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
	return c.runHolds(ctx, ev, clients, d, func(ctx context.Context, b buyer, rng *rand.Rand) (int, error) {
		i := rng.IntN(len(ev.Seats) - 1)
		res, err := c.api.CreateHoldWithResponse(ctx, ev.event,
			&client.CreateHoldParams{IdempotencyKey: uuid.NewString(), XAdmissionToken: b.admission},
			client.CreateHoldJSONRequestBody{SeatIds: []string{ev.Seats[i], ev.Seats[i+1]}}, b.auth)
		return status(res, err), err
	})
}

// RunBestAvailableHolds lets clients buyers ask for the best two seats of
// the event's category (create-best-available-hold), with a fresh
// Idempotency-Key each time, for d: every buyer wants the same front
// seats, and each gets the next best. A 409 is not-enough-seats.
func (c *Client) RunBestAvailableHolds(ctx context.Context, ev Event, clients int, d time.Duration) (HoldResult, error) {
	return c.runHolds(ctx, ev, clients, d, func(ctx context.Context, b buyer, _ *rand.Rand) (int, error) {
		res, err := c.api.CreateBestAvailableHoldWithResponse(ctx, ev.event,
			&client.CreateBestAvailableHoldParams{IdempotencyKey: uuid.NewString(), XAdmissionToken: b.admission},
			client.CreateBestAvailableHoldJSONRequestBody{CategoryID: ev.Category, Quantity: 2}, b.auth)
		return status(res, err), err
	})
}

// runHolds lets clients buyers call hold as fast as they can for d.
func (c *Client) runHolds(ctx context.Context, ev Event, clients int, d time.Duration,
	hold func(ctx context.Context, b buyer, rng *rand.Rand) (int, error),
) (HoldResult, error) {
	buyers := make([]buyer, clients)
	for i := range buyers {
		var err error
		if buyers[i], err = c.newBuyer(ctx, ev.event); err != nil {
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
				t0 := time.Now()
				code, _ := hold(ctx, b, rng)
				switch {
				case code == http.StatusAccepted:
					held++
					local = append(local, time.Since(t0))
				case code == http.StatusConflict:
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
