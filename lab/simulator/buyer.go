package simulator

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"boxoffice/domain/purchase"
	"boxoffice/platform/auth"
	"boxoffice/platform/backoff"
	"boxoffice/testkit/apiclient"
)

// Problem types the buyer reacts to.
const (
	typeSeatUnavailable = "/problems/seat-unavailable"
	typeSeatLimit       = "/problems/seat-limit"
)

// statusClientClosed is what the API answers when its own context was
// canceled mid-request; the buyer retries it like a 5xx.
const statusClientClosed = 499

// Buyer outcomes.
const (
	outcomeTicketed  = "ticketed"
	outcomeFailed    = "failed"
	outcomeDeclined  = "declined"
	outcomeAbandoned = "abandoned"
	outcomeSoldOut   = "sold_out"
	outcomeGaveUp    = "gave_up"
	outcomeError     = "error"
	outcomeReadmit   = "readmit" // transient: the admission token was refused
)

// finalStatuses are the order statuses nothing moves on from by itself.
var finalStatuses = map[string]bool{"ticketed": true, "failed": true, "canceled": true, "refunded": true}

// buyer is one simulated client. It uses one API process throughout, as a
// client behind a sticky load balancer would.
type buyer struct {
	sim   *Sim
	api   *apiclient.Client
	sse   *apiclient.Client
	rng   *rand.Rand
	token string
	plan  string // pay, decline or abandon
	etag  string // of the last seat map read

	arrived time.Time
	orderID string
	outcome string
	lastErr error
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// buyerJitter is how a buyer spreads its waits: ±20%.
var buyerJitter = backoff.Even(0.2)

// Retry schedules of a buyer's calls, before buyerJitter.
var (
	// holdRetries doubles from 200ms.
	holdRetries = backoff.Policy{Base: 200 * time.Millisecond}
	// confirmRetries grows by 300ms a try.
	confirmRetries = backoff.Policy{Base: 300 * time.Millisecond, Power: 1}
)

// jitter spreads d by buyerJitter, drawing from the buyer's own seeded
// source.
func (b *buyer) jitter(d time.Duration) time.Duration {
	return buyerJitter.Apply(d, b.rng.Float64())
}

// run is the buyer's whole visit. It records its outcome in the counters.
func (b *buyer) run(ctx context.Context) {
	s := b.sim
	s.c.arrived.Add(1)
	b.arrived = time.Now()
	token, err := auth.Mint(s.cfg.JWTSecret, auth.Identity{UserID: uuid.New(), Role: auth.RoleBuyer}, 2*time.Hour)
	if err != nil {
		b.fail(fmt.Errorf("mint buyer token: %w", err))
		return
	}
	b.token = token
	b.outcome = b.visit(ctx)
	switch b.outcome {
	case outcomeTicketed:
		s.c.ticketed.Add(1)
	case outcomeFailed:
		s.c.failed.Add(1)
	case outcomeDeclined:
		s.c.declined.Add(1)
	case outcomeAbandoned:
		s.c.abandoned.Add(1)
	case outcomeSoldOut:
		s.c.soldOut.Add(1)
	case outcomeGaveUp:
		s.c.gaveUp.Add(1)
	}
	s.finish(b)
}

func (b *buyer) fail(err error) {
	b.outcome = outcomeError
	b.lastErr = err
	b.sim.noteError(err)
}

func (b *buyer) visit(ctx context.Context) string {
	s := b.sim
	var holdStart time.Time
	for round := 0; ; round++ {
		admission, ok := b.admit(ctx)
		if !ok {
			return b.outcome
		}
		s.c.admitted.Add(1)
		if round == 0 {
			s.queueWait.add(time.Since(b.arrived))
		}
		holdStart = time.Now()
		if b.hold(ctx, admission) {
			break
		}
		if b.outcome != outcomeReadmit || round > 0 {
			if b.outcome == outcomeReadmit {
				b.outcome = outcomeError
			}
			return b.outcome
		}
		// The admission lapsed or was revoked: back to the waiting room, once.
	}
	s.c.holds.Add(1)
	s.c.holding.Add(1)
	heldAt := time.Now()

	if b.plan == "abandon" { // walks away: the hold expires
		s.c.holding.Add(-1)
		s.trackAbandoned(b)
		return outcomeAbandoned
	}
	piID, status := b.awaitIntent(ctx)
	s.c.holding.Add(-1)
	switch {
	case piID == "" && status == "":
		return outcomeError
	case piID == "":
		return outcomeFailed // e.g. expired before the intent was made
	}
	s.intentWait.add(time.Since(heldAt))
	// A person takes a moment to type a card number.
	if err := sleep(ctx, time.Duration(200+b.rng.IntN(800))*time.Millisecond); err != nil {
		return outcomeError
	}
	action := "authorize"
	if b.plan == "decline" {
		action = "decline"
	}
	// 409 (gone): the intent no longer awaits a card — its hold expired
	// and it was canceled, or an earlier attempt that timed out went
	// through. The order's final status tells which.
	ok, gone := b.confirm(ctx, piID, action)
	// A buyer whose card is declined tries again with another, and
	// another, until the order has no attempt left: a decline before the
	// last keeps the order and its seats (purchase.DefaultPaymentAttempts).
	for try := 1; action == "decline" && ok && try < purchase.DefaultPaymentAttempts; try++ {
		ok, gone = b.confirm(ctx, piID, action)
	}
	if !ok && !gone {
		return outcomeError
	}
	if ok && action == "authorize" {
		s.c.paid.Add(1)
	}
	paidAt := time.Now()
	final := b.follow(ctx)
	switch {
	case final == "ticketed":
		if gone {
			s.c.paid.Add(1)
		}
		s.timeToTicket.add(time.Since(holdStart))
		s.payToTicket.add(time.Since(paidAt))
		b.collectTickets(ctx)
		return outcomeTicketed
	case final == "" && ctx.Err() != nil:
		return outcomeError
	case final == "":
		b.fail(fmt.Errorf("order %s: no final status", b.orderID))
		return outcomeError
	case action == "decline" && !gone:
		return outcomeDeclined
	default:
		return outcomeFailed
	}
}

// waitingRoomView is the waiting room's answer.
type waitingRoomView struct {
	Status           string `json:"status"`
	PollAfterSeconds int64  `json:"pollAfterSeconds"`
	AdmissionToken   string `json:"admissionToken"`
}

// admit joins the waiting room and polls it until admitted. It returns
// false (with b.outcome set) when the buyer leaves: sold out, out of
// patience, or the run ended.
func (b *buyer) admit(ctx context.Context) (string, bool) {
	s := b.sim
	path := "/v1/events/" + s.eventID + "/waiting-room"
	s.c.queued.Add(1)
	defer s.c.queued.Add(-1)
	deadline := time.Now().Add(s.cfg.Patience)
	method := http.MethodPost
	for {
		if ctx.Err() != nil {
			b.outcome = outcomeError
			return "", false
		}
		if s.soldOut.Load() {
			b.outcome = outcomeSoldOut
			return "", false
		}
		if time.Now().After(deadline) {
			b.outcome = outcomeGaveUp
			return "", false
		}
		var v waitingRoomView
		res, err := b.api.Do(ctx, method, path, b.token, nil, nil, &v)
		var wait time.Duration
		switch {
		case err != nil:
			b.sim.noteError(err)
			wait = 500 * time.Millisecond
		case res.Status == http.StatusOK && v.AdmissionToken != "":
			return v.AdmissionToken, true
		case res.Status == http.StatusAccepted:
			method = http.MethodGet
			wait = time.Duration(max(1, v.PollAfterSeconds)) * time.Second
		case res.Status == http.StatusNotFound && method == http.MethodGet:
			method = http.MethodPost // our admission lapsed or the room forgot us: join again
			wait = 0
		case res.Status == http.StatusTooManyRequests || res.Status == http.StatusServiceUnavailable:
			wait = max(res.RetryAfter, time.Second)
		default:
			b.sim.noteStatus("waiting-room", res.Status)
			wait = 2 * time.Second
		}
		t := time.NewTimer(b.jitter(wait))
		select {
		case <-ctx.Done():
			t.Stop()
			b.outcome = outcomeError
			return "", false
		case <-s.soldOut.Done():
			t.Stop() // the loop's next turn leaves sold out
		case <-t.C:
		}
	}
}

// hold picks seats near the front and holds them, retrying a timed-out or
// failed request with the same Idempotency-Key and moving on to other
// seats on 409. It returns false (with b.outcome set) when it gets none.
func (b *buyer) hold(ctx context.Context, admission string) bool {
	s := b.sim
	want := 1
	if b.rng.IntN(5) == 0 {
		want = 2
	}
	taken := map[string]bool{}
	emptyMaps := 0
	var seats []seat
	for attempt := 0; attempt < 12; attempt++ {
		if s.soldOut.Load() {
			b.outcome = outcomeSoldOut
			return false
		}
		// The map is a hint; refresh it at first and after two misses.
		if seats == nil || attempt%3 == 2 {
			m, err := b.seatMap(ctx)
			if err != nil {
				s.noteError(err)
				if sleep(ctx, b.jitter(time.Second)) != nil {
					b.outcome = outcomeError
					return false
				}
				continue
			}
			seats = m
		}
		pick := b.choose(seats, taken, want)
		if len(pick) == 0 {
			emptyMaps++
			if emptyMaps > 3 {
				b.outcome = outcomeSoldOut
				return false
			}
			seats = nil // held seats may come back: look again shortly
			if sleep(ctx, b.jitter(3*time.Second)) != nil {
				b.outcome = outcomeError
				return false
			}
			continue
		}
		res, ok := b.holdOnce(ctx, admission, pick)
		switch {
		case ok:
			return true
		case res.Status == http.StatusConflict && res.Problem.Type == typeSeatUnavailable:
			s.c.conflicts.Add(1)
			for _, id := range pick {
				taken[id] = true
			}
			for _, id := range res.Problem.SeatIDs {
				taken[id] = true
			}
		case res.Status == http.StatusConflict && res.Problem.Type == typeSeatLimit:
			b.outcome = outcomeSoldOut
			return false
		case res.Status == http.StatusForbidden:
			s.noteStatus("holds", res.Status)
			b.outcome = outcomeReadmit
			return false
		default: // retries exhausted, …
			if res.Status != 0 {
				s.noteStatus("holds", res.Status)
			}
			b.outcome = outcomeError
			return false
		}
	}
	b.outcome = outcomeSoldOut
	return false
}

// holdOnce sends one hold, retrying timeouts, connection errors, 429 and
// 5xx with the same Idempotency-Key: a retry returns the original order.
func (b *buyer) holdOnce(ctx context.Context, admission string, seatIDs []string) (apiclient.Response, bool) {
	s := b.sim
	key := uuid.NewString()
	headers := map[string]string{"Idempotency-Key": key, "X-Admission-Token": admission}
	body := map[string]any{"seatIds": seatIDs}
	start := time.Now()
	var res apiclient.Response
	for try := range 6 {
		if try > 0 {
			s.c.retries.Add(1)
			if sleep(ctx, b.jitter(max(holdRetries.Delay(try), res.RetryAfter))) != nil {
				return apiclient.Response{}, false
			}
		}
		var out struct {
			OrderID string `json:"orderId"`
		}
		var err error
		reqStart := time.Now()
		// Where the request's time goes: waiting for a connection, the
		// server's part (last byte written to first byte read), the rest
		// is this process. The transport calls some of these from its own
		// goroutines.
		var getConn, gotConn, wrote, firstByte atomic.Int64
		now := func(v *atomic.Int64) { v.Store(time.Now().UnixNano()) }
		tctx := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			GetConn:              func(string) { now(&getConn) },
			GotConn:              func(httptrace.GotConnInfo) { now(&gotConn) },
			WroteRequest:         func(httptrace.WroteRequestInfo) { now(&wrote) },
			GotFirstResponseByte: func() { now(&firstByte) },
		})
		res, err = b.api.Do(tctx, http.MethodPost, "/v1/events/"+s.eventID+"/holds", b.token, headers, body, &out)
		s.holdRequest.add(time.Since(reqStart))
		if a, z := getConn.Load(), gotConn.Load(); a != 0 && z != 0 {
			s.holdConn.add(time.Duration(z - a))
		}
		if a, z := wrote.Load(), firstByte.Load(); a != 0 && z != 0 {
			s.holdServer.add(time.Duration(z - a))
		}
		switch {
		case err != nil:
			s.noteError(err)
			res = apiclient.Response{}
			continue
		case res.Status == http.StatusAccepted || res.Status == http.StatusOK:
			s.holdLatency.add(time.Since(start))
			b.orderID = out.OrderID
			return res, true
		case res.Status == http.StatusTooManyRequests || res.Status >= 500 || res.Status == statusClientClosed:
			s.noteStatus("holds", res.Status)
			continue
		default:
			return res, false
		}
	}
	return res, false
}

// choose picks want adjacent available seats, favouring the front of the
// map: the index is drawn from a distribution skewed towards zero, so the
// best seats are the most contended.
func (b *buyer) choose(seats []seat, taken map[string]bool, want int) []string {
	var free []int
	for i, st := range seats {
		if st.Status == "available" && !taken[st.ID] {
			free = append(free, i)
		}
	}
	if len(free) == 0 {
		return nil
	}
	u := b.rng.Float64()
	i := int(float64(len(free)) * u * u * u)
	pick := []string{seats[free[i]].ID}
	for j := i + 1; j < len(free) && len(pick) < want; j++ {
		if free[j] != free[j-1]+1 { // not adjacent: settle for fewer
			break
		}
		pick = append(pick, seats[free[j]].ID)
	}
	return pick
}

// orderView is the part of an order the buyer reads.
type orderView struct {
	Status  string `json:"status"`
	Payment *struct {
		PaymentIntentID string `json:"paymentIntentId"`
	} `json:"payment"`
	Tickets []struct {
		SeatID string `json:"seatId"`
	} `json:"tickets"`
}

// awaitIntent reads the order until it has a PaymentIntent (as a checkout
// page would). It returns the intent's id, or "" with the order's status
// when the order ended first ("" status on error).
func (b *buyer) awaitIntent(ctx context.Context) (piID, status string) {
	s := b.sim
	deadline := time.Now().Add(s.cfg.IntentWait)
	for {
		var o orderView
		res, err := b.api.Do(ctx, http.MethodGet, "/v1/orders/"+b.orderID, b.token, nil, nil, &o)
		switch {
		case err != nil:
			s.noteError(err)
		case res.Status == http.StatusOK && o.Payment != nil && o.Payment.PaymentIntentID != "":
			return o.Payment.PaymentIntentID, o.Status
		case res.Status == http.StatusOK && finalStatuses[o.Status]:
			return "", o.Status
		case res.Status != http.StatusOK:
			s.noteStatus("orders", res.Status)
		}
		if time.Now().After(deadline) {
			b.fail(fmt.Errorf("order %s: no PaymentIntent after %s", b.orderID, s.cfg.IntentWait))
			return "", ""
		}
		// A checkout page polls about once a second.
		if sleep(ctx, b.jitter(time.Second)) != nil {
			return "", ""
		}
	}
}

// confirm authorizes or declines the intent in the sandbox, retrying
// transport errors and 5xx. gone is true when the sandbox answered 409:
// the intent was canceled (its hold expired) before the buyer paid.
func (b *buyer) confirm(ctx context.Context, piID, action string) (ok, gone bool) {
	s := b.sim
	for try := range 6 {
		if try > 0 && sleep(ctx, b.jitter(confirmRetries.Delay(try))) != nil {
			return false, false
		}
		res, err := b.api.Do(ctx, http.MethodPost, "/v1/sandbox/payment-intents/"+piID+"/"+action, b.token, nil, nil, nil)
		switch {
		case err != nil:
			s.noteError(err)
		case res.Status < 300:
			return true, false
		case res.Status == http.StatusConflict:
			return false, true
		case res.Status >= 500 || res.Status == http.StatusTooManyRequests || res.Status == statusClientClosed:
			s.noteStatus("sandbox", res.Status)
		default:
			s.noteStatus("sandbox", res.Status)
			b.outcome, b.lastErr = outcomeError, fmt.Errorf("sandbox %s: status %d", action, res.Status)
			return false, false
		}
	}
	b.fail(fmt.Errorf("sandbox %s: retries exhausted", action))
	return false, false
}

// follow reads the order's Server-Sent Events until a final status,
// reconnecting when the stream drops. It returns the final status, or ""
// when it gave up.
func (b *buyer) follow(ctx context.Context) string {
	s := b.sim
	deadline := time.Now().Add(s.cfg.FollowTimeout)
	for reconnects := 0; time.Now().Before(deadline); reconnects++ {
		if reconnects > 0 && sleep(ctx, b.jitter(500*time.Millisecond)) != nil {
			return ""
		}
		status, err := b.stream(ctx, time.Until(deadline))
		if finalStatuses[status] {
			return status
		}
		if err != nil && ctx.Err() == nil {
			s.noteError(err)
		}
		if ctx.Err() != nil {
			return ""
		}
	}
	return ""
}

// stream reads one SSE connection and returns the last status it saw.
func (b *buyer) stream(ctx context.Context, limit time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.sse.BaseURL+"/v1/orders/"+b.orderID+"/events", nil)
	if err != nil {
		return "", fmt.Errorf("order events request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+b.token)
	req.Header.Set("Accept", "text/event-stream")
	res, err := b.sse.HTTP.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET /v1/orders/{id}/events: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b.sim.noteStatus("order-events", res.StatusCode)
		return "", nil
	}
	var last string
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		var ev struct {
			Status string `json:"status"`
		}
		if json.Unmarshal([]byte(strings.TrimSpace(data)), &ev) == nil && ev.Status != "" {
			last = ev.Status
			if finalStatuses[last] {
				return last, nil
			}
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return last, fmt.Errorf("read order events: %w", err)
	}
	return last, nil
}

// collectTickets records the seats of the buyer's tickets, from which the
// run computes sold and oversold.
func (b *buyer) collectTickets(ctx context.Context) {
	s := b.sim
	for try := range 5 {
		if try > 0 && sleep(ctx, b.jitter(500*time.Millisecond)) != nil {
			return
		}
		var o orderView
		res, err := b.api.Do(ctx, http.MethodGet, "/v1/orders/"+b.orderID, b.token, nil, nil, &o)
		if err != nil || res.Status != http.StatusOK {
			continue
		}
		ids := make([]string, 0, len(o.Tickets))
		for _, t := range o.Tickets {
			ids = append(ids, t.SeatID)
		}
		slices.Sort(ids)
		s.recordTickets(b.orderID, ids)
		return
	}
	s.noteError(fmt.Errorf("order %s: tickets unreadable", b.orderID))
}
