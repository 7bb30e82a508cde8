package simulator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync/atomic"
	"time"

	"github.com/boxoffice/boxoffice/client"
	"github.com/google/uuid"

	"boxoffice/domain/payments"
	"boxoffice/domain/purchase"
	"boxoffice/lab/memstripe"
	"boxoffice/platform/auth"
	"boxoffice/platform/backoff"
)

// Problem types the buyer reacts to.
const (
	typeSeatUnavailable = "/problems/seat-unavailable"
	typeSeatLimit       = "/problems/seat-limit"
	typeNotEnoughSeats  = "/problems/not-enough-seats"
	typePresaleLimit    = "/problems/presale-seat-limit"
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
	sim  *Sim
	api  *client.ClientWithResponses
	sse  *client.Client
	rng  *rand.Rand
	auth client.RequestEditorFn // the buyer's bearer token
	plan string                 // pay, decline or abandon
	etag string                 // of the last seat map read
	code string                 // presale code, sent when joining; "" for none
	best bool                   // asks for the best available seats, not for seats of the map

	arrived time.Time
	orderID string
	order   uuid.UUID // orderID, as the client's path parameters take it
	secret  string    // the PaymentIntent's client secret, as the order shows it
	outcome string
	lastErr error
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error { return backoff.Sleep(ctx, d) }

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
	b.auth = client.WithBearer(token)
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
	if b.best {
		s.c.bestHolds.Add(1)
	}
	s.c.holding.Add(1)
	heldAt := time.Now()

	if b.plan == "abandon" { // walks away: the hold expires
		s.c.holding.Add(-1)
		s.trackAbandoned(b)
		return outcomeAbandoned
	}
	// A checkout page follows the order from here on: one stream tells it
	// when the PaymentIntent exists and when the order is final.
	events := b.follow(ctx)
	defer events.close()
	piID, status := b.awaitIntent(ctx, events)
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
	action := client.SandboxAuthorize
	if b.plan == "decline" {
		action = client.SandboxDecline
	}
	// 409 (gone): the intent no longer awaits a card — its hold expired
	// and it was canceled, or an earlier attempt that timed out went
	// through. The order's final status tells which.
	ok, gone := b.confirm(ctx, piID, action)
	// A buyer whose card is declined tries again with another, and
	// another, until the order has no attempt left: a decline before the
	// last keeps the order and its seats (purchase.DefaultPaymentAttempts).
	for try := 1; action == client.SandboxDecline && ok && try < purchase.DefaultPaymentAttempts; try++ {
		ok, gone = b.confirm(ctx, piID, action)
	}
	if !ok && !gone {
		return outcomeError
	}
	if ok && action == client.SandboxAuthorize {
		s.c.paid.Add(1)
	}
	paidAt := time.Now()
	final := events.final(ctx)
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
	case action == client.SandboxDecline && !gone:
		return outcomeDeclined
	default:
		return outcomeFailed
	}
}

// waitingRoomAnswer is what join and poll answer alike: the status,
// the body of a 200 or 202 (else zero), and Retry-After.
type waitingRoomAnswer struct {
	status     int
	room       client.WaitingRoomBody
	retryAfter time.Duration
}

// waitingRoom joins the waiting room (POST) or polls it (GET). The
// generated client decodes a 200; the body of the 202 a queued buyer
// gets, which openapi.yaml does not list, is decoded here from the
// bytes the client keeps.
func (b *buyer) waitingRoom(ctx context.Context, method string) (waitingRoomAnswer, error) {
	var body []byte
	var typed *client.WaitingRoomBody
	var hr *http.Response
	b.sim.c.room.Add(1)
	if method == http.MethodPost {
		editors := []client.RequestEditorFn{b.auth}
		if b.code != "" {
			editors = append(editors, client.WithHeader("X-Presale-Code", b.code))
		}
		res, err := b.api.JoinWaitingRoomWithResponse(ctx, b.sim.event, editors...)
		if err != nil {
			return waitingRoomAnswer{}, fmt.Errorf("POST /v1/events/{id}/waiting-room: %w", err)
		}
		body, typed, hr = res.Body, res.JSON200, res.HTTPResponse
	} else {
		res, err := b.api.GetWaitingRoomWithResponse(ctx, b.sim.event, b.auth)
		if err != nil {
			return waitingRoomAnswer{}, fmt.Errorf("GET /v1/events/{id}/waiting-room: %w", err)
		}
		body, typed, hr = res.Body, res.JSON200, res.HTTPResponse
	}
	a := waitingRoomAnswer{status: hr.StatusCode, retryAfter: client.RetryAfter(hr)}
	switch {
	case typed != nil:
		a.room = *typed
	case hr.StatusCode == http.StatusAccepted:
		if err := json.Unmarshal(body, &a.room); err != nil {
			return a, fmt.Errorf("%s /v1/events/{id}/waiting-room: decode 202: %w", method, err)
		}
	}
	return a, nil
}

// admit joins the waiting room and polls it until admitted. It returns
// false (with b.outcome set) when the buyer leaves: sold out, out of
// patience, or the run ended.
func (b *buyer) admit(ctx context.Context) (string, bool) {
	s := b.sim
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
		res, err := b.waitingRoom(ctx, method)
		var wait time.Duration
		switch {
		case err != nil:
			b.sim.noteError(err)
			wait = 500 * time.Millisecond
		case res.status == http.StatusOK && deref(res.room.AdmissionToken) != "":
			return *res.room.AdmissionToken, true
		case res.status == http.StatusAccepted:
			method = http.MethodGet
			wait = time.Duration(max(1, deref(res.room.PollAfterSeconds))) * time.Second
		case res.status == http.StatusNotFound && method == http.MethodGet:
			method = http.MethodPost // our admission lapsed or the room forgot us: join again
			wait = 0
		case res.status == http.StatusTooManyRequests || res.status == http.StatusServiceUnavailable:
			wait = max(res.retryAfter, time.Second)
		default:
			b.sim.noteStatus("waiting-room", res.status)
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
	if b.best {
		return b.holdBest(ctx, admission, want)
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
		res, ok := b.holdOnce(ctx, b.holdSeats(admission, pick))
		switch {
		case ok:
			return true
		case res.status == http.StatusConflict && res.problem.Type == typeSeatUnavailable:
			s.c.conflicts.Add(1)
			for _, id := range pick {
				taken[id] = true
			}
			for _, id := range res.problem.SeatIds {
				taken[id] = true
			}
		case res.status == http.StatusConflict && res.problem.Type == typeSeatLimit:
			b.outcome = outcomeSoldOut
			return false
		case res.status == http.StatusForbidden:
			s.noteStatus("holds", res.status)
			b.outcome = outcomeReadmit
			return false
		default: // retries exhausted, …
			if res.status != 0 {
				s.noteStatus("holds", res.status)
			}
			b.outcome = outcomeError
			return false
		}
	}
	b.outcome = outcomeSoldOut
	return false
}

// holdAnswer is what the last hold request answered: its status (0
// without an answer), its problem and Retry-After.
type holdAnswer struct {
	status     int
	problem    client.Problem
	retryAfter time.Duration
}

// holdBest asks for the best want seats of the event's category,
// retrying as holdOnce does; with fewer seats left than want, it asks for
// one. It returns false (with b.outcome set) when it gets none.
func (b *buyer) holdBest(ctx context.Context, admission string, want int) bool {
	for ; want > 0; want-- {
		if b.sim.soldOut.Load() {
			break
		}
		res, ok := b.holdOnce(ctx, b.holdBestAvailable(admission, want))
		switch {
		case ok:
			return true
		case res.status == http.StatusConflict && (res.problem.Type == typeNotEnoughSeats || res.problem.Type == typeSeatLimit || res.problem.Type == typePresaleLimit):
			b.sim.c.conflicts.Add(1)
			continue
		case res.status == http.StatusForbidden:
			b.sim.noteStatus("best-available-holds", res.status)
			b.outcome = outcomeReadmit
			return false
		default:
			if res.status != 0 {
				b.sim.noteStatus("best-available-holds", res.status)
			}
			b.outcome = outcomeError
			return false
		}
	}
	b.outcome = outcomeSoldOut
	return false
}

// holdRequest sends one hold request with the Idempotency-Key key and
// says its status, order (on 202), Retry-After and problem.
type holdRequest func(ctx context.Context, key string) (status int, orderID string, retryAfter time.Duration, problem client.Problem, err error)

// holdSeats is the request for seatIDs (create-hold).
func (b *buyer) holdSeats(admission string, seatIDs []string) holdRequest {
	return func(ctx context.Context, key string) (int, string, time.Duration, client.Problem, error) {
		res, err := b.api.CreateHoldWithResponse(ctx, b.sim.event,
			&client.CreateHoldParams{IdempotencyKey: key, XAdmissionToken: admission},
			client.CreateHoldJSONRequestBody{SeatIds: seatIDs}, b.auth)
		if err != nil {
			return 0, "", 0, client.Problem{}, fmt.Errorf("POST /v1/events/{id}/holds: %w", err)
		}
		if res.JSON202 != nil {
			return res.StatusCode(), res.JSON202.OrderID, 0, client.Problem{}, nil
		}
		return res.StatusCode(), "", client.RetryAfter(res.HTTPResponse), client.ProblemOf(res.HTTPResponse, res.Body), nil
	}
}

// holdBestAvailable is the request for want seats of the event's category
// (create-best-available-hold).
func (b *buyer) holdBestAvailable(admission string, want int) holdRequest {
	return func(ctx context.Context, key string) (int, string, time.Duration, client.Problem, error) {
		res, err := b.api.CreateBestAvailableHoldWithResponse(ctx, b.sim.event,
			&client.CreateBestAvailableHoldParams{IdempotencyKey: key, XAdmissionToken: admission},
			client.CreateBestAvailableHoldJSONRequestBody{CategoryID: b.sim.category, Quantity: int64(want)}, b.auth)
		if err != nil {
			return 0, "", 0, client.Problem{}, fmt.Errorf("POST /v1/events/{id}/best-available-holds: %w", err)
		}
		if res.JSON202 != nil {
			return res.StatusCode(), res.JSON202.OrderID, 0, client.Problem{}, nil
		}
		return res.StatusCode(), "", client.RetryAfter(res.HTTPResponse), client.ProblemOf(res.HTTPResponse, res.Body), nil
	}
}

// holdOnce sends one hold, retrying timeouts, connection errors, 429 and
// 5xx with the same Idempotency-Key: a retry returns the original order.
func (b *buyer) holdOnce(ctx context.Context, send holdRequest) (holdAnswer, bool) {
	s := b.sim
	key := uuid.NewString()
	start := time.Now()
	var res holdAnswer
	for try := range 6 {
		if try > 0 {
			s.c.retries.Add(1)
			if sleep(ctx, b.jitter(max(holdRetries.Delay(try), res.retryAfter))) != nil {
				return holdAnswer{}, false
			}
		}
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
		status, orderID, retryAfter, problem, err := send(tctx, key)
		s.holdRequest.add(time.Since(reqStart))
		if a, z := getConn.Load(), gotConn.Load(); a != 0 && z != 0 {
			s.holdConn.add(time.Duration(z - a))
		}
		if a, z := wrote.Load(), firstByte.Load(); a != 0 && z != 0 {
			s.holdServer.add(time.Duration(z - a))
		}
		if err != nil {
			s.noteError(err)
			res = holdAnswer{}
			continue
		}
		res = holdAnswer{status: status, retryAfter: retryAfter}
		switch {
		case orderID != "":
			order, err := uuid.Parse(orderID)
			if err != nil {
				b.fail(fmt.Errorf("hold: order id %q: %w", orderID, err))
				return holdAnswer{}, false
			}
			s.holdLatency.add(time.Since(start))
			b.orderID, b.order = orderID, order
			return res, true
		case res.status == http.StatusTooManyRequests || res.status >= 500 || res.status == statusClientClosed:
			s.noteStatus("holds", res.status)
			continue
		default:
			res.problem = problem
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
		if st.Status == client.SeatBodyStatusAvailable && !taken[st.ID] {
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

// deref is *p, or the zero value when p is nil: the generated client
// makes optional fields pointers.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// awaitIntent waits for the order's PaymentIntent as a checkout page built
// on the order stream does: the stream's payment event names it (pushed
// when the payments worker has created it), then one read of the order
// gives the client secret a real checkout hands to Stripe.js. It returns
// the intent's id, or "" with the order's status when the order ended
// first ("" status on error).
func (b *buyer) awaitIntent(ctx context.Context, events *orderEvents) (piID, status string) {
	s := b.sim
	ctx, cancel := context.WithTimeout(ctx, s.cfg.IntentWait)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				b.fail(fmt.Errorf("order %s: no PaymentIntent after %s", b.orderID, s.cfg.IntentWait))
			}
			return "", ""
		case ev, ok := <-events.c:
			switch {
			case !ok:
				b.fail(fmt.Errorf("order %s: stream ended before its PaymentIntent: %w", b.orderID, events.err))
				return "", ""
			case ev.payment != "":
				if !b.readClientSecret(ctx, ev.payment) {
					return "", ""
				}
				return ev.payment, ""
			case finalStatuses[ev.status]:
				return "", ev.status
			}
		}
	}
}

// readClientSecret reads the order once for the client secret of the
// intent the stream named (the stream never carries it), retrying
// transport errors and 5xx.
func (b *buyer) readClientSecret(ctx context.Context, piID string) bool {
	s := b.sim
	for try := range 5 {
		if try > 0 && sleep(ctx, b.jitter(holdRetries.Delay(try))) != nil {
			return false
		}
		res, err := b.api.GetOrderWithResponse(ctx, b.order, b.auth)
		switch {
		case err != nil:
			s.noteError(fmt.Errorf("GET /v1/orders/{id}: %w", err))
		case res.JSON200 != nil && res.JSON200.Payment != nil && deref(res.JSON200.Payment.PaymentIntentID) == piID:
			if b.secret = deref(res.JSON200.Payment.ClientSecret); b.secret == "" {
				b.fail(fmt.Errorf("order %s: intent %s has no client secret", b.orderID, piID))
				return false
			}
			return true
		case res.JSON200 != nil:
			b.fail(fmt.Errorf("order %s: the stream named intent %s, the order another", b.orderID, piID))
			return false
		default:
			s.noteStatus("orders", res.StatusCode())
		}
	}
	b.fail(fmt.Errorf("order %s: read its client secret: retries exhausted", b.orderID))
	return false
}

// confirm authorizes or declines the intent, retrying transport errors
// and 5xx: at the Stripe stand-in with the client secret when the run
// pays through it (Config.StripeBase), as Stripe.js does, else through
// the sandbox's buyer routes. ok is true when the provider took the card's
// answer (approved, or declined); gone is true when the intent no longer
// awaits a card (its hold expired and it was canceled, or an earlier
// attempt that timed out went through).
func (b *buyer) confirm(ctx context.Context, piID string, action client.SandboxAction) (ok, gone bool) {
	s := b.sim
	call, send := "sandbox", b.confirmAtSandbox
	if s.cfg.StripeBase != "" {
		call, send = "stripe", b.confirmAtStripe
	}
	for try := range 6 {
		if try > 0 && sleep(ctx, b.jitter(confirmRetries.Delay(try))) != nil {
			return false, false
		}
		status, err := send(ctx, piID, action)
		switch {
		case err != nil:
			s.noteError(err)
		case status < 300:
			return true, false
		case status == http.StatusConflict:
			return false, true
		case status >= 500 || status == http.StatusTooManyRequests || status == statusClientClosed:
			s.noteStatus(call, status)
		default:
			s.noteStatus(call, status)
			b.outcome, b.lastErr = outcomeError, fmt.Errorf("%s %s: status %d", call, action, status)
			return false, false
		}
	}
	b.fail(fmt.Errorf("%s %s: retries exhausted", call, action))
	return false, false
}

// confirmAtSandbox authorizes or declines the intent through the
// sandbox's buyer route: 2xx when it took the card's answer, 409 when the
// intent no longer awaits a card.
func (b *buyer) confirmAtSandbox(ctx context.Context, piID string, action client.SandboxAction) (int, error) {
	res, err := b.api.SandboxPaymentIntentWithResponse(ctx, piID, action, b.auth)
	if err != nil {
		return 0, fmt.Errorf("POST /v1/sandbox/payment-intents/{id}/%s: %w", action, err)
	}
	return res.StatusCode(), nil
}

// confirmAtStripe confirms the intent at the Stripe stand-in with an
// approved or a declined test card, and answers as the sandbox does: 200
// when Stripe took the card's answer (a decline, 402 card_declined,
// included), 409 for Stripe's 400 payment_intent_unexpected_state (the
// intent no longer awaits a card), else Stripe's status.
func (b *buyer) confirmAtStripe(ctx context.Context, piID string, action client.SandboxAction) (int, error) {
	card := memstripe.CardApproved
	if action == client.SandboxDecline {
		card = memstripe.CardDeclined
	}
	err := memstripe.Confirm(ctx, b.sim.stripe, b.sim.cfg.StripeBase, piID, b.secret, card)
	var refused *memstripe.ConfirmError
	switch {
	case err == nil:
		return http.StatusOK, nil
	case !errors.As(err, &refused):
		return 0, fmt.Errorf("POST stripe /v1/payment_intents/{id}/confirm: %w", err)
	case refused.Status == http.StatusPaymentRequired && refused.Code == payments.CodeCardDeclined && action == client.SandboxDecline:
		return http.StatusOK, nil
	case refused.Status == http.StatusBadRequest && refused.Code == "payment_intent_unexpected_state":
		return http.StatusConflict, nil
	}
	return refused.Status, nil
}

// collectTickets records the seats of the buyer's tickets, from which the
// run computes sold and oversold.
func (b *buyer) collectTickets(ctx context.Context) {
	s := b.sim
	for try := range 5 {
		if try > 0 && sleep(ctx, b.jitter(500*time.Millisecond)) != nil {
			return
		}
		res, err := b.api.GetOrderWithResponse(ctx, b.order, b.auth)
		if err != nil || res.JSON200 == nil {
			continue
		}
		ids := make([]string, 0, len(res.JSON200.Tickets))
		for _, t := range res.JSON200.Tickets {
			ids = append(ids, t.SeatID)
		}
		slices.Sort(ids)
		s.recordTickets(b.orderID, ids)
		return
	}
	s.noteError(fmt.Errorf("order %s: tickets unreadable", b.orderID))
}
