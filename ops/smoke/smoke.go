// Package smoke is `boxoffice smoke`: one synthetic purchase through a
// running deployment's API, end to end — an event of its own, the waiting
// room, a hold, a sandbox payment, the ticket — and a test webhook
// delivered to a listener of its own. It is the check a failover runs
// before it reopens the onsales (docs/failover.md): it passes only when
// the API, the database, the relay, the bus and the workers all work.
//
// It needs the deployment to run the sandbox payment provider and to sign
// bearer tokens with a secret it knows (BOXOFFICE_JWT_SECRET), and its
// workers to reach the webhook listener.
package smoke

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/boxoffice/boxoffice/client"
	"github.com/google/uuid"

	"boxoffice/platform/auth"
	"boxoffice/platform/backoff"
)

// Config is a smoke run's.
type Config struct {
	// API is the deployment's API base URL. Required.
	API string
	// JWTSecret signs the organizer's and the buyer's tokens. Required.
	JWTSecret []byte
	// WebhookListen is where the test webhook is received. Defaults to
	// 127.0.0.1:0, a free loopback port.
	WebhookListen string
	// WebhookURL is the URL the deployment's workers reach the listener
	// at. Defaults to http://<the listener's address>/smoke.
	WebhookURL string
	// Timeout bounds the whole run. Defaults to 2 minutes.
	Timeout time.Duration
	// Log receives one line per step, when set.
	Log io.Writer
}

// Result says how far the run got and how long each step took.
type Result struct {
	EventID, OrderID string
	// Held is when the hold succeeded; Ticketed when the order was
	// ticketed; Webhook when the test webhook arrived.
	Started, Held, Ticketed, Webhook time.Time
}

// Run makes one synthetic purchase and one test webhook delivery. It
// returns nil only when the order was ticketed and the webhook received;
// otherwise an error that names the step that failed and why.
func Run(ctx context.Context, cfg Config) (Result, error) {
	res := Result{Started: time.Now()}
	if cfg.API == "" || len(cfg.JWTSecret) == 0 {
		return res, errors.New("smoke: the API URL and the JWT secret are required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	api, err := client.NewClientWithResponses(strings.TrimRight(cfg.API, "/"))
	if err != nil {
		return res, fmt.Errorf("smoke: api client: %w", err)
	}
	org := uuid.New()
	orgTok, err := auth.Mint(cfg.JWTSecret, auth.Identity{UserID: uuid.New(), Role: auth.RoleOrganizer, OrganizerID: org}, time.Hour)
	if err != nil {
		return res, fmt.Errorf("smoke: mint organizer token: %w", err)
	}
	buyerTok, err := auth.Mint(cfg.JWTSecret, auth.Identity{UserID: uuid.New(), Role: auth.RoleBuyer}, time.Hour)
	if err != nil {
		return res, fmt.Errorf("smoke: mint buyer token: %w", err)
	}
	asOrg, asBuyer := client.WithBearer(orgTok), client.WithBearer(buyerTok)
	step := func(format string, a ...any) {
		fmt.Fprintf(cfg.Log, "%6.2fs  %s\n", time.Since(res.Started).Seconds(), fmt.Sprintf(format, a...))
	}

	// The webhook listener first: the endpoint must exist before the test.
	hooks := make(chan string, 8)
	ln, err := net.Listen("tcp", cmp.Or(cfg.WebhookListen, "127.0.0.1:0"))
	if err != nil {
		return res, fmt.Errorf("smoke: webhook listener: %w", err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		select {
		case hooks <- r.Header.Get("webhook-id") + " " + string(body):
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	hookURL := cmp.Or(cfg.WebhookURL, "http://"+ln.Addr().String()+"/smoke")

	ev, err := api.CreateEventWithResponse(ctx, nil, client.CreateEventJSONRequestBody{
		Name: "Smoke " + time.Now().UTC().Format(time.DateTime), StartsAt: time.Now().Add(30 * 24 * time.Hour), Currency: "eur",
		Sections: []client.SectionInput{{Name: "Smoke", Rows: 1, SeatsPerRow: 1, PriceMinor: 100}},
	}, asOrg)
	if err != nil {
		return res, fmt.Errorf("smoke: create event: %w", err)
	}
	if ev.JSON201 == nil {
		return res, fmt.Errorf("smoke: create event: status %d (%s)", ev.StatusCode(), client.ProblemOf(ev.HTTPResponse, ev.Body).Type)
	}
	res.EventID = ev.JSON201.ID
	eventID := uuid.MustParse(res.EventID)
	step("event %s created", res.EventID)

	seats, err := api.ListSeatsWithResponse(ctx, eventID, nil, asBuyer)
	if err != nil {
		return res, fmt.Errorf("smoke: read the seat map: %w", err)
	}
	if seats.JSON200 == nil || len(seats.JSON200.Seats) != 1 {
		return res, fmt.Errorf("smoke: read the seat map: status %d", seats.StatusCode())
	}
	admission, err := admit(ctx, api, eventID, asBuyer)
	if err != nil {
		return res, err
	}
	step("admitted")
	params := &client.CreateHoldParams{IdempotencyKey: uuid.NewString(), XAdmissionToken: admission}
	var orderID uuid.UUID
	for {
		held, err := api.CreateHoldWithResponse(ctx, eventID, params, client.CreateHoldJSONRequestBody{SeatIds: []string{seats.JSON200.Seats[0].ID}}, asBuyer)
		if err == nil && held.JSON202 != nil {
			res.OrderID = held.JSON202.OrderID
			orderID = uuid.MustParse(res.OrderID)
			break
		}
		if err == nil && held.StatusCode() < 500 && held.StatusCode() != http.StatusTooManyRequests {
			return res, fmt.Errorf("smoke: hold: status %d (%s)", held.StatusCode(), client.ProblemOf(held.HTTPResponse, held.Body).Type)
		}
		if err := pause(ctx, 250*time.Millisecond, "hold"); err != nil {
			return res, err
		}
	}
	res.Held = time.Now()
	step("held, order %s", res.OrderID)

	piID, err := poll(ctx, "PaymentIntent", func() (string, error) {
		o, err := api.GetOrderWithResponse(ctx, orderID, asBuyer)
		if err != nil || o.JSON200 == nil {
			return "", nil
		}
		if o.JSON200.Payment != nil && o.JSON200.Payment.PaymentIntentID != nil {
			return *o.JSON200.Payment.PaymentIntentID, nil
		}
		if s := string(o.JSON200.Status); s == "failed" || s == "canceled" {
			return "", fmt.Errorf("order %s", s)
		}
		return "", nil
	})
	if err != nil {
		return res, err
	}
	pay, err := api.SandboxPaymentIntentWithResponse(ctx, piID, client.SandboxAuthorize, asBuyer)
	if err != nil || pay.StatusCode() >= 300 {
		return res, fmt.Errorf("smoke: sandbox payment: %v (status %d)", err, pay.StatusCode())
	}
	step("paid (%s)", piID)
	if _, err := poll(ctx, "ticket", func() (string, error) {
		o, err := api.GetOrderWithResponse(ctx, orderID, asBuyer)
		if err != nil || o.JSON200 == nil {
			return "", nil
		}
		switch s := string(o.JSON200.Status); {
		case s == "ticketed" && len(o.JSON200.Tickets) == 1:
			return s, nil
		case s == "failed" || s == "canceled" || s == "refunded":
			return "", fmt.Errorf("order %s", s)
		}
		return "", nil
	}); err != nil {
		return res, err
	}
	res.Ticketed = time.Now()
	step("ticketed")

	ep, err := api.CreateWebhookEndpointWithResponse(ctx, nil, client.CreateWebhookEndpointJSONRequestBody{URL: hookURL}, asOrg)
	if err != nil || ep.JSON201 == nil {
		return res, fmt.Errorf("smoke: create webhook endpoint: %v (status %d)", err, ep.StatusCode())
	}
	test, err := api.TestWebhookEndpointWithResponse(ctx, uuid.MustParse(ep.JSON201.ID), nil, asOrg)
	if err != nil || test.JSON202 == nil {
		return res, fmt.Errorf("smoke: send test webhook: %v (status %d)", err, test.StatusCode())
	}
	for {
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("smoke: test webhook %s not received: %w", test.JSON202.ID, ctx.Err())
		case got := <-hooks:
			if strings.Contains(got, test.JSON202.ID) {
				res.Webhook = time.Now()
				step("test webhook received")
				return res, nil
			}
		}
	}
}

// admit joins the event's waiting room and polls it until admitted.
func admit(ctx context.Context, api *client.ClientWithResponses, event uuid.UUID, as client.RequestEditorFn) (string, error) {
	joined := false
	return poll(ctx, "admission", func() (string, error) {
		var body *client.WaitingRoomBody
		var status int
		if !joined { // join once, then poll
			j, err := api.JoinWaitingRoomWithResponse(ctx, event, as)
			if err != nil {
				return "", nil
			}
			body, status = j.JSON200, j.StatusCode()
		} else {
			g, err := api.GetWaitingRoomWithResponse(ctx, event, as)
			if err != nil {
				return "", nil
			}
			body, status = g.JSON200, g.StatusCode()
		}
		switch {
		case body != nil && body.AdmissionToken != nil:
			return *body.AdmissionToken, nil
		case status == http.StatusAccepted:
			joined = true
		case status == http.StatusNotFound:
			joined = false
		case status >= 400 && status < 500 && status != http.StatusTooManyRequests:
			return "", fmt.Errorf("waiting room: status %d", status)
		}
		return "", nil
	})
}

// poll calls check every 250 ms until it returns a value or an error, or
// ctx ends.
func poll(ctx context.Context, what string, check func() (string, error)) (string, error) {
	for {
		v, err := check()
		if err != nil {
			return "", fmt.Errorf("smoke: %s: %w", what, err)
		}
		if v != "" {
			return v, nil
		}
		if err := pause(ctx, 250*time.Millisecond, what); err != nil {
			return "", err
		}
	}
}

// pause waits d (backoff.Sleep), or returns ctx's error naming what it
// was waiting for.
func pause(ctx context.Context, d time.Duration, what string) error {
	if err := backoff.Sleep(ctx, d); err != nil {
		return fmt.Errorf("smoke: %s: %w", what, err)
	}
	return nil
}
