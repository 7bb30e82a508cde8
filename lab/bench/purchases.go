package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/boxoffice/boxoffice/client"
	"github.com/google/uuid"

	"boxoffice/domain/payments/sandbox"
	"boxoffice/lab/memstripe"
	"boxoffice/platform/db"
)

// PurchaseResult is what a run of whole purchases measured.
type PurchaseResult struct {
	Elapsed  time.Duration
	Started  int
	Ticketed int
	Failed   int // ended in another final state, or an HTTP error
	// FailedAt counts the failed purchases by the step they stopped at.
	FailedAt map[string]int `json:",omitempty"`
	// P50, P99 are the times from sending the hold to seeing the order
	// ticketed on its event stream, buyer's side.
	P50, P99 time.Duration
	// HoldToIntent is the p50 and p99 of the time from sending the hold to
	// the stream's `payment` event (the PaymentIntent is ready to
	// confirm); AuthorizedToTicketed of the time from the sandbox's answer
	// to the card confirmation to the stream's `ticketed` status. Both
	// over the ticketed purchases, buyer's side.
	HoldToIntent, AuthorizedToTicketed [2]time.Duration
	// Hold is the p50 and p99 of the hold request's answer time; Confirm
	// of the time from the `payment` event to the card's confirmation
	// answered (the order read for its client secret, then the stand-in's
	// or the sandbox's answer). Both over the ticketed purchases, buyer's
	// side.
	Hold, Confirm [2]time.Duration
	// Steady counts the purchases that ended ticketed between
	// PurchaseRun.Warmup and PurchaseRun.Duration after the start: the
	// window's steady state, past the pipeline's filling and before its
	// draining.
	Steady SteadyCount
}

// SteadyCount is the purchases ticketed within [From, To) of a run.
type SteadyCount struct {
	From, To time.Duration
	Ticketed int
}

// steadyCount counts the purchases ticketed at or after warmup and before
// duration (each given as a time since the run's start); none, with an
// empty interval, unless 0 < warmup < duration.
func steadyCount(ticketedAt []time.Duration, warmup, duration time.Duration) SteadyCount {
	if warmup <= 0 || warmup >= duration {
		return SteadyCount{}
	}
	c := SteadyCount{From: warmup, To: duration}
	for _, at := range ticketedAt {
		if at >= warmup && at < duration {
			c.Ticketed++
		}
	}
	return c
}

// TicketedPerSec is completed purchases per second over the whole run:
// from the first purchase started to the last one ended, so the pipeline's
// filling and draining included.
func (r PurchaseResult) TicketedPerSec() float64 { return float64(r.Ticketed) / r.Elapsed.Seconds() }

// SteadyPerSec is purchases ticketed per second in the steady state
// (Steady); TicketedPerSec where the run measured none.
func (r PurchaseResult) SteadyPerSec() float64 {
	if r.Steady.To <= r.Steady.From {
		return r.TicketedPerSec()
	}
	return float64(r.Steady.Ticketed) / (r.Steady.To - r.Steady.From).Seconds()
}

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
	// Warmup is how long after the start the steady state begins
	// (PurchaseResult.Steady): with a closed loop, the time the buyers'
	// first purchases take to fill the pipeline. 0: no steady count.
	Warmup time.Duration
}

// RunPurchases buys one seat at a time, like real buyers do in the sandbox:
// admission, hold, wait for the PaymentIntent, confirm the card at the
// sandbox, wait for the tickets. Seats are taken in order, so holds never
// conflict and every purchase measures the whole path.
func (c *Client) RunPurchases(ctx context.Context, ev Event, run PurchaseRun) (PurchaseResult, error) {
	var (
		next                 atomic.Int64
		mu                   sync.Mutex
		latencies, toIntent  []time.Duration
		holds, confirms      []time.Duration
		ticketedAt           []time.Duration // since begin
		authorizedToTicketed []time.Duration
		res                  PurchaseResult
		wg                   sync.WaitGroup
		begin                = time.Now()
	)
	purchase := func() {
		i := int(next.Add(1)) - 1
		if i >= len(ev.Seats) {
			return
		}
		start := time.Now()
		marks, failed := c.purchase(ctx, ev, ev.Seats[i])
		ok := failed == ""
		mu.Lock()
		defer mu.Unlock()
		res.Started++
		if ok {
			res.Ticketed++
			ticketedAt = append(ticketedAt, marks.ticketed.Sub(begin))
			latencies = append(latencies, marks.ticketed.Sub(start))
			toIntent = append(toIntent, marks.intent.Sub(marks.hold))
			holds = append(holds, marks.held.Sub(marks.hold))
			confirms = append(confirms, marks.authorized.Sub(marks.intent))
			authorizedToTicketed = append(authorizedToTicketed, marks.ticketed.Sub(marks.authorized))
		} else {
			res.Failed++
			if res.FailedAt == nil {
				res.FailedAt = map[string]int{}
			}
			res.FailedAt[failed]++
		}
	}
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
	res.Steady = steadyCount(ticketedAt, run.Warmup, run.Duration)
	slices.Sort(latencies)
	res.P50, res.P99 = percentile(latencies, 0.50), percentile(latencies, 0.99)
	for _, hop := range []struct {
		d   []time.Duration
		out *[2]time.Duration
	}{{toIntent, &res.HoldToIntent}, {authorizedToTicketed, &res.AuthorizedToTicketed}, {holds, &res.Hold}, {confirms, &res.Confirm}} {
		slices.Sort(hop.d)
		hop.out[0], hop.out[1] = percentile(hop.d, 0.50), percentile(hop.d, 0.99)
	}
	return res, ctx.Err()
}

// purchaseMarks are when a purchase passed each step, buyer's side.
type purchaseMarks struct {
	hold, held, intent, authorized, ticketed time.Time
}

// purchase takes one buyer from admission to tickets; failed says at which
// step it stopped when the order did not end ticketed. The buyer follows the order by its event stream,
// as a buyer's app does: the `payment` event says the PaymentIntent is
// ready to confirm, the `status` events bring it to a final status.
func (c *Client) purchase(ctx context.Context, ev Event, seat string) (marks purchaseMarks, failed string) {
	b, err := c.newBuyer(ctx, ev.event)
	if err != nil {
		return marks, "admission (" + err.Error() + ")"
	}
	marks.hold = time.Now()
	held, err := c.api.CreateHoldWithResponse(ctx, ev.event,
		&client.CreateHoldParams{IdempotencyKey: uuid.NewString(), XAdmissionToken: b.admission},
		client.CreateHoldJSONRequestBody{SeatIds: []string{seat}}, b.auth)
	marks.held = time.Now()
	if err != nil || held.JSON202 == nil {
		return marks, "hold " + strconv.Itoa(status(held, err))
	}
	order, err := uuid.Parse(held.JSON202.OrderID)
	if err != nil {
		return marks, "hold answer"
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := c.stream.StreamOrderEvents(ctx, order, nil, b.auth)
	if err != nil {
		return marks, "stream"
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return marks, "stream " + strconv.Itoa(res.StatusCode)
	}
	failed = "stream ended"
	eachEvent(res.Body, func(event, data string) bool {
		switch event {
		case "payment":
			marks.intent = time.Now()
			var p struct{ PaymentIntentID string }
			if json.Unmarshal([]byte(data), &p) != nil || p.PaymentIntentID == "" {
				failed = "payment event"
				return false
			}
			if !c.confirm(ctx, order, p.PaymentIntentID, b.auth) {
				failed = "confirm"
				return false
			}
			marks.authorized = time.Now()
		case "status":
			var st struct{ Status string }
			if json.Unmarshal([]byte(data), &st) != nil {
				failed = "status event"
				return false
			}
			switch st.Status {
			case "ticketed":
				marks.ticketed = time.Now()
				failed = ""
				return false
			case "failed", "canceled", "refunded":
				failed = "order " + st.Status
				return false
			}
		}
		return true
	})
	return marks, failed
}

// confirm approves the buyer's card: at the Stripe stand-in, with the
// client secret the order shows, as Stripe.js does, when StripeBase is
// set; else through the sandbox's buyer route.
func (c *Client) confirm(ctx context.Context, order uuid.UUID, intentID string, bearer client.RequestEditorFn) bool {
	if c.StripeBase == "" {
		paid, err := c.api.SandboxPaymentIntentWithResponse(ctx, intentID, client.SandboxAuthorize, bearer)
		return err == nil && paid.JSON200 != nil
	}
	o, err := c.api.GetOrderWithResponse(ctx, order, bearer)
	if err != nil || o.JSON200 == nil || o.JSON200.Payment == nil || o.JSON200.Payment.ClientSecret == nil {
		return false
	}
	return memstripe.Confirm(ctx, c.stripe, c.StripeBase, intentID, *o.JSON200.Payment.ClientSecret, memstripe.CardApproved) == nil
}

// SandboxRole reports whether a cost role (db.WithRole) is the sandbox
// payment provider's rather than Boxoffice's: work a remote Stripe would
// do on its own servers. They are its provider calls
// (sandbox.ProviderRole), its webhook sender (the
// "sandbox_webhooks" worker) and the API's sandbox-only pages, which stand
// in for Stripe.js ("api sandbox-…" operations).
func SandboxRole(role string) bool {
	return role == sandbox.ProviderRole || role == "sandbox_webhooks" || strings.HasPrefix(role, "api sandbox-")
}

// PrintCosts writes what one ticketed order cost each role, from a run
// that ticketed that many orders: transactions (writing ones), statements
// and rows written, per ticketed order. Boxoffice's roles come first with
// their total, "Boxoffice (all product roles)", the figure that is
// Boxoffice's own; then the sandbox's (SandboxRole) with theirs, "sandbox
// (stand-in for Stripe)"; then both together. A transaction writes when
// one of its statements' command tags says so: a function that writes
// called with SELECT (hold_reserve) counts as a read.
func PrintCosts(w io.Writer, costs []db.RoleCost, ticketed int) {
	n := float64(ticketed)
	line := func(name string, c db.Cost) {
		fmt.Fprintf(w, "  %-44s %9.2f %9.2f %9.2f %9.2f %9.2f\n", name,
			float64(c.Transactions)/n, float64(c.WriteTransactions)/n, float64(c.Statements)/n, float64(c.RowsWritten)/n,
			float64(c.StatementTime)/float64(time.Millisecond)/n)
	}
	add := func(total *db.Cost, c db.Cost) {
		total.Transactions += c.Transactions
		total.WriteTransactions += c.WriteTransactions
		total.Statements += c.Statements
		total.RowsWritten += c.RowsWritten
		total.StatementTime += c.StatementTime
	}
	fmt.Fprintf(w, "\n  %-44s %9s %9s %9s %9s %9s\n", "per ticketed order, by role", "tx", "write tx", "stmts", "rows", "db ms")
	var product, sandbox db.Cost
	for _, c := range costs {
		if !SandboxRole(c.Role) {
			line(c.Role, c.Cost)
			add(&product, c.Cost)
		}
	}
	line("Boxoffice (all product roles)", product)
	fmt.Fprintln(w)
	for _, c := range costs {
		if SandboxRole(c.Role) {
			line(c.Role, c.Cost)
			add(&sandbox, c.Cost)
		}
	}
	line("sandbox (stand-in for Stripe)", sandbox)
	fmt.Fprintln(w)
	all := product
	add(&all, sandbox)
	line("all roles", all)
	fmt.Fprintln(w)
}
