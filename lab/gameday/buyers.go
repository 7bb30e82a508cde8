package gameday

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/boxoffice/boxoffice/client"
	"github.com/google/uuid"

	"boxoffice/platform/auth"
	"boxoffice/platform/backoff"
)

// sale is the onsale the game day runs: buyers who each buy one seat after
// another through whichever region's API is current, until the event is
// sold out or the sale is stopped.
type sale struct {
	event     uuid.UUID
	jwtSecret []byte
	api       atomic.Pointer[string] // the region buyers are sent to
	standby   atomic.Bool            // api is the standby's

	mu             sync.Mutex
	orders         []heldOrder
	firstStandbyAt time.Time // first hold the standby accepted
	soldOut        atomic.Bool
	noneFreeSince  atomic.Int64 // Unix ns since no seat was available, 0: one is
	holdsByRegion  [2]atomic.Int64
	paidByRegion   [2]atomic.Int64
	errorsByRegion [2]atomic.Int64
}

// heldOrder is an order a hold created, as the buyer saw it.
type heldOrder struct {
	ID      string    `json:"id"`
	HeldAt  time.Time `json:"held_at"`
	Standby bool      `json:"standby"`
}

func (s *sale) region() int {
	if s.standby.Load() {
		return 1
	}
	return 0
}

// run runs n buyers until ctx ends or the event is sold out.
func (s *sale) run(ctx context.Context, n int) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { s.buyer(ctx, uint64(i)) })
	}
	wg.Wait()
}

// buyer is one person buying seat after seat, under one identity: a
// buyer who left the queue and joined again as someone else would leave
// an admission behind that the release controller counts against the few
// seats left.
func (s *sale) buyer(ctx context.Context, i uint64) {
	rng := rand.New(rand.NewPCG(i, uint64(time.Now().UnixNano())))
	user := uuid.New()
	for ctx.Err() == nil && !s.soldOut.Load() {
		s.purchase(ctx, rng, user)
	}
}

// purchase is one buyer's purchase of one seat, on the current region.
func (s *sale) purchase(ctx context.Context, rng *rand.Rand, user uuid.UUID) {
	base := *s.api.Load()
	region := s.region()
	api, err := client.NewClientWithResponses(base)
	if err != nil {
		return
	}
	tok, err := auth.Mint(s.jwtSecret, auth.Identity{UserID: user, Role: auth.RoleBuyer}, time.Hour)
	if err != nil {
		return
	}
	as := client.WithBearer(tok)
	fail := func() {
		s.errorsByRegion[region].Add(1)
		_ = sleep(ctx, 200*time.Millisecond)
	}
	seats, err := api.ListSeatsWithResponse(ctx, s.event, nil, as)
	if err != nil || seats.JSON200 == nil {
		fail()
		return
	}
	var free []string
	held := 0
	for _, st := range seats.JSON200.Seats {
		switch st.Status {
		case client.SeatBodyStatusAvailable:
			free = append(free, st.ID)
		case client.SeatBodyStatusHeld:
			held++
		}
	}
	if len(free) == 0 {
		// Sold out, or every seat left is held by an order still in
		// between (a payment being confirmed keeps its hold up to the
		// grace period): either way no buyer gets another seat. Five
		// seconds of that ends the sale; the report says what was left.
		first := s.noneFreeSince.Load()
		if first == 0 {
			s.noneFreeSince.CompareAndSwap(0, time.Now().UnixNano())
		} else if region == 1 && (held == 0 || time.Since(time.Unix(0, first)) > 5*time.Second) {
			// Only the standby ends the sale: the drill is of a sale
			// that goes on after the failover.
			s.soldOut.Store(true)
		}
		_ = sleep(ctx, time.Second)
		return
	}
	s.noneFreeSince.Store(0)
	// Admission: join, then poll as told, until admitted, sold out, or
	// the region is gone.
	var admission string
	joined := false
	for admission == "" {
		if ctx.Err() != nil || *s.api.Load() != base || s.soldOut.Load() {
			return
		}
		var body *client.WaitingRoomBody
		var status int
		if !joined {
			j, err := api.JoinWaitingRoomWithResponse(ctx, s.event, as)
			if err != nil {
				fail()
				continue
			}
			body, status = j.JSON200, j.StatusCode()
		} else {
			g, err := api.GetWaitingRoomWithResponse(ctx, s.event, as)
			if err != nil {
				fail()
				continue
			}
			body, status = g.JSON200, g.StatusCode()
		}
		switch {
		case body != nil && body.AdmissionToken != nil:
			admission = *body.AdmissionToken
		case status == http.StatusAccepted:
			joined = true
			_ = sleep(ctx, 300*time.Millisecond)
		case status == http.StatusNotFound:
			joined = false
		default:
			fail()
		}
	}
	seat := free[rng.IntN(len(free))]
	hold, err := api.CreateHoldWithResponse(ctx, s.event, &client.CreateHoldParams{IdempotencyKey: uuid.NewString(), XAdmissionToken: admission},
		client.CreateHoldJSONRequestBody{SeatIds: []string{seat}}, as)
	if err != nil || hold.JSON202 == nil {
		fail()
		return
	}
	now := time.Now()
	s.holdsByRegion[region].Add(1)
	s.mu.Lock()
	s.orders = append(s.orders, heldOrder{ID: hold.JSON202.OrderID, HeldAt: now, Standby: region == 1})
	if region == 1 && s.firstStandbyAt.IsZero() {
		s.firstStandbyAt = now
	}
	s.mu.Unlock()
	order := uuid.MustParse(hold.JSON202.OrderID)
	// Pay once the intent exists; then follow the order to its end.
	deadline := time.Now().Add(45 * time.Second)
	paid := false
	for time.Now().Before(deadline) && ctx.Err() == nil {
		o, err := api.GetOrderWithResponse(ctx, order, as)
		if err == nil && o.JSON200 != nil {
			switch st := string(o.JSON200.Status); {
			case st == "ticketed" || st == "failed" || st == "canceled" || st == "refunded":
				return
			case !paid && o.JSON200.Payment != nil && o.JSON200.Payment.PaymentIntentID != nil:
				r, err := api.SandboxPaymentIntentWithResponse(ctx, *o.JSON200.Payment.PaymentIntentID, client.SandboxAuthorize, as)
				if err == nil && r.StatusCode() < 300 {
					paid = true
					s.paidByRegion[region].Add(1)
				}
			}
		} else if *s.api.Load() != base {
			return // the region is gone: this order's fate is the failover's
		}
		_ = sleep(ctx, 250*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) error { return backoff.Sleep(ctx, d) }
