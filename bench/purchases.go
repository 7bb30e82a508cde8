package bench

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// PurchaseResult is what a run of whole purchases measured.
type PurchaseResult struct {
	Elapsed  time.Duration
	Started  int
	Ticketed int
	Failed   int // ended in another final state, or an HTTP error
	// P50, P99 are the times from sending the hold to seeing the order
	// ticketed, buyer's side, polling included.
	P50, P99 time.Duration
}

// TicketedPerSec is completed purchases per second.
func (r PurchaseResult) TicketedPerSec() float64 { return float64(r.Ticketed) / r.Elapsed.Seconds() }

// PurchaseRun configures RunPurchases.
type PurchaseRun struct {
	// Concurrency is how many buyers are in a purchase at once (closed
	// loop) when Rate is 0.
	Concurrency int
	// Rate, when positive, starts that many purchases a second whatever
	// the system's pace (open loop), for measuring latency at a set load.
	Rate float64
	// Duration is how long purchases are started.
	Duration time.Duration
}

// RunPurchases buys one seat at a time, like real buyers do in the sandbox:
// admission, hold, wait for the PaymentIntent, confirm the card at the
// sandbox, wait for the tickets. Seats are taken in order, so holds never
// conflict and every purchase measures the whole path.
func (c *Client) RunPurchases(ctx context.Context, ev Event, run PurchaseRun) (PurchaseResult, error) {
	var (
		next      atomic.Int64
		mu        sync.Mutex
		latencies []time.Duration
		res       PurchaseResult
		wg        sync.WaitGroup
	)
	purchase := func() {
		i := int(next.Add(1)) - 1
		if i >= len(ev.Seats) {
			return
		}
		start := time.Now()
		ok := c.purchase(ctx, ev, ev.Seats[i])
		mu.Lock()
		defer mu.Unlock()
		res.Started++
		if ok {
			res.Ticketed++
			latencies = append(latencies, time.Since(start))
		} else {
			res.Failed++
		}
	}
	begin := time.Now()
	deadline := begin.Add(run.Duration)
	if run.Rate > 0 {
		tick := time.NewTicker(time.Duration(float64(time.Second) / run.Rate))
		for now := range tick.C {
			if now.After(deadline) || ctx.Err() != nil {
				break
			}
			wg.Go(purchase)
		}
		tick.Stop()
	} else {
		for range run.Concurrency {
			wg.Go(func() {
				for time.Now().Before(deadline) && ctx.Err() == nil {
					purchase()
				}
			})
		}
	}
	wg.Wait()
	res.Elapsed = time.Since(begin)
	slices.Sort(latencies)
	res.P50, res.P99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
	return res, ctx.Err()
}

type orderView struct {
	Status  string
	Payment *struct{ PaymentIntentID string }
}

// purchase takes one buyer from admission to tickets; false when the order
// did not end ticketed.
func (c *Client) purchase(ctx context.Context, ev Event, seat string) bool {
	b, err := c.newBuyer(ctx, ev.ID)
	if err != nil {
		return false
	}
	auth := map[string]string{"Authorization": "Bearer " + b.bearer}
	var held struct{ OrderID string }
	status, err := c.do(ctx, http.MethodPost, "/v1/events/"+ev.ID+"/holds", map[string]string{
		"Authorization": "Bearer " + b.bearer, "X-Admission-Token": b.admission, "Idempotency-Key": uuid.NewString(),
	}, map[string]any{"seatIds": []string{seat}}, &held)
	if err != nil || status != http.StatusAccepted {
		return false
	}
	path := "/v1/orders/" + held.OrderID
	o, ok := c.await(ctx, path, auth, func(o orderView) bool { return o.Payment != nil && o.Payment.PaymentIntentID != "" })
	if !ok {
		return false
	}
	status, err = c.do(ctx, http.MethodPost, fmt.Sprintf("/v1/sandbox/payment-intents/%s/authorize", o.Payment.PaymentIntentID), auth, nil, nil)
	if err != nil || status != http.StatusOK {
		return false
	}
	o, ok = c.await(ctx, path, auth, func(o orderView) bool {
		return o.Status != "pending_payment" && o.Status != "capture_pending" && o.Status != "paid"
	})
	return ok && o.Status == "ticketed"
}

// await polls the order every 50 ms until done says so or a minute has
// passed. A buyer's app polls (or follows the SSE stream); the interval
// bounds how much the measurement adds to each step, and keeps the polling
// itself from being what the benchmark measures.
func (c *Client) await(ctx context.Context, path string, auth map[string]string, done func(orderView) bool) (orderView, bool) {
	deadline := time.Now().Add(time.Minute)
	for wait := 50 * time.Millisecond; time.Now().Before(deadline) && ctx.Err() == nil; {
		var o orderView
		if status, err := c.do(ctx, http.MethodGet, path, auth, nil, &o); err == nil && status == http.StatusOK && done(o) {
			return o, true
		}
		time.Sleep(wait)
	}
	return orderView{}, false
}
