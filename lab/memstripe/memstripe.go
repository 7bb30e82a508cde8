// Package memstripe is an in-memory stand-in for the part of Stripe's API
// that Boxoffice's Stripe provider calls, for benchmarks that must not
// count a payment provider's work as the product's: the product talks to
// it with its real Stripe client (STRIPE_API_BASE), buyers confirm their
// PaymentIntents at it as Stripe.js would, and it sends Stripe-format,
// signed webhooks to the product's real ingress.
//
// It keeps everything in memory and forgets it on exit; it is no sandbox
// for developers (that is domain/payments/sandbox, whose state survives in
// PostgreSQL). What it implements:
//
//	POST /v1/payment_intents                  create (manual capture)
//	GET  /v1/payment_intents                  list (created[gte], created[lte])
//	GET  /v1/payment_intents/{id}             retrieve
//	POST /v1/payment_intents/{id}/confirm     the buyer's card (client_secret): approved, or
//	                                          declined for pm_card_visa_chargeDeclined
//	POST /v1/payment_intents/{id}/capture     capture
//	POST /v1/payment_intents/{id}/cancel      cancel
//	POST /v1/refunds                          refund (payment_intent, amount)
//
// Mutations honour Idempotency-Key as Stripe does: the same key answers
// the first response again. Webhooks about one PaymentIntent are sent one
// after another, oldest first, each retried until it gets a 2xx.
package memstripe

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"boxoffice/domain/payments"
)

// Config configures New.
type Config struct {
	// SecretKey is the API key the product must send (sk_test_…).
	SecretKey string
	// WebhookURL is the product's Stripe ingress, …/v1/webhooks/stripe.
	WebhookURL string
	// WebhookSecret signs the webhooks (whsec_…).
	WebhookSecret string
	// Senders is how many webhooks are in flight at once. Defaults to 16.
	Senders int
	// Logger receives delivery failures. Defaults to discarding them.
	Logger *slog.Logger
}

// Server is the stand-in; it is an http.Handler.
type Server struct {
	cfg    Config
	client *http.Client

	mu      sync.Mutex
	intents map[string]*intent
	order   []string // intent ids by creation, for list
	idem    map[string]response
	queues  []chan []byte
}

type intent struct {
	ID               string            `json:"id"`
	Object           string            `json:"object"`
	Amount           int64             `json:"amount"`
	AmountCapturable int64             `json:"amount_capturable"`
	AmountReceived   int64             `json:"amount_received"`
	CaptureMethod    string            `json:"capture_method"`
	ClientSecret     *string           `json:"client_secret"`
	Created          int64             `json:"created"`
	Currency         string            `json:"currency"`
	LatestCharge     *string           `json:"latest_charge"`
	Livemode         bool              `json:"livemode"`
	Metadata         map[string]string `json:"metadata"`
	Status           string            `json:"status"`
	LastPaymentError *paymentError     `json:"last_payment_error"`

	secret   string
	refunded int64
}

// response is an answer kept for its Idempotency-Key.
type response struct {
	status int
	body   []byte
}

// paymentError is a PaymentIntent's last_payment_error and the error of a
// declined confirmation, as Stripe writes both.
type paymentError struct {
	Type        string `json:"type"`
	Code        string `json:"code"`
	DeclineCode string `json:"decline_code,omitempty"`
	Message     string `json:"message"`
}

// The test cards a buyer confirms with (Stripe's test PaymentMethods of
// the same names).
const (
	// CardApproved is a Visa the issuer approves.
	CardApproved = "pm_card_visa"
	// CardDeclined is a Visa the issuer declines (card_declined,
	// generic_decline): the confirmation answers 402, the intent stays in
	// requires_payment_method with a last_payment_error, and
	// payment_intent.payment_failed is sent; the buyer may confirm again.
	CardDeclined = "pm_card_visa_chargeDeclined"
)

// New returns a stand-in; Run sends its webhooks.
func New(cfg Config) *Server {
	if cfg.Senders <= 0 {
		cfg.Senders = 16
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	// One idle connection per sender, as Stripe keeps its webhook
	// connections open: http.DefaultTransport keeps two per host, so the
	// other senders dialed (and the product accepted) a connection per
	// webhook, and the bench counted that as the product's cost.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = cfg.Senders, cfg.Senders
	s := &Server{
		cfg: cfg, intents: map[string]*intent{}, idem: map[string]response{},
		client: &http.Client{Transport: tr, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}
	for range cfg.Senders {
		s.queues = append(s.queues, make(chan []byte, 4096))
	}
	return s
}

// Run sends queued webhooks until ctx is done: one sender per queue, and
// an intent's events always on the same queue, so they arrive in order.
func (s *Server) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, q := range s.queues {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case payload := <-q:
					s.deliver(ctx, payload)
				}
			}
		})
	}
	wg.Wait()
}

func (s *Server) deliver(ctx context.Context, payload []byte) {
	for wait := 50 * time.Millisecond; ctx.Err() == nil; wait = min(2*wait, 5*time.Second) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.WebhookURL, bytes.NewReader(payload))
		if err != nil {
			return
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", payments.SignWebhook(payload, s.cfg.WebhookSecret, time.Now()))
		res, err := s.client.Do(req)
		if err == nil {
			// Read to the end: a body closed unread closes its
			// connection, and the next webhook dialed (and the product
			// accepted) one of its own.
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode/100 == 2 {
				return
			}
			s.cfg.Logger.Warn("webhook refused; retrying", "status", res.StatusCode)
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// ServeHTTP implements the routes of the package comment.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/v1/")
	parts := strings.Split(path, "/")
	if err := r.ParseForm(); err != nil {
		s.fail(w, http.StatusBadRequest, "invalid_request_error", "", "bad form")
		return
	}
	// confirm is the buyer's call (a publishable key and the client
	// secret, as Stripe.js sends them); everything else is the product's.
	buyer := len(parts) == 3 && parts[2] == "confirm"
	if !buyer && r.Header.Get("Authorization") != "Bearer "+s.cfg.SecretKey {
		s.fail(w, http.StatusUnauthorized, "invalid_request_error", "", "Invalid API Key provided")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Method == http.MethodPost && key != "" {
		if res, ok := s.idem[key]; ok {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(res.status)
			_, _ = w.Write(res.body)
			return
		}
	}
	var (
		status   = http.StatusOK
		out      any
		code     string
		msg      string
		declined *paymentError
	)
	switch {
	case r.Method == http.MethodPost && path == "payment_intents":
		out = s.create(r)
	case r.Method == http.MethodGet && path == "payment_intents":
		out = s.list(r)
	case r.Method == http.MethodPost && path == "refunds":
		out, code, msg = s.refund(r)
	case len(parts) >= 2 && parts[0] == "payment_intents":
		in, ok := s.intents[parts[1]]
		switch {
		case !ok:
			status, code, msg = http.StatusNotFound, "resource_missing", "No such payment_intent: '"+parts[1]+"'"
		case len(parts) == 2 && r.Method == http.MethodGet:
			out = in.view(false)
		case len(parts) == 3 && r.Method == http.MethodPost:
			out, code, msg = s.act(in, parts[2], r)
			if code == "" && parts[2] == "confirm" && in.LastPaymentError != nil {
				declined = in.LastPaymentError
			}
		default:
			status, code, msg = http.StatusNotFound, "resource_missing", "Unrecognized request URL"
		}
	default:
		status, code, msg = http.StatusNotFound, "resource_missing", "Unrecognized request URL"
	}
	if declined != nil {
		// Stripe answers a declined confirmation 402 with the card's
		// error and the intent; an idempotent retry gets the same.
		body, _ := json.Marshal(map[string]any{"error": map[string]any{
			"type": declined.Type, "code": declined.Code, "decline_code": declined.DeclineCode,
			"message": declined.Message, "payment_intent": out,
		}})
		s.answer(w, r, key, http.StatusPaymentRequired, body)
		return
	}
	if code != "" {
		if status == http.StatusOK {
			status = http.StatusBadRequest
		}
		s.fail(w, status, "invalid_request_error", code, msg)
		return
	}
	body, _ := json.Marshal(out)
	s.answer(w, r, key, status, body)
}

// answer writes a response and, for a POST with an Idempotency-Key, keeps
// it for the key's retries.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, key string, status int, body []byte) {
	if r.Method == http.MethodPost && key != "" {
		s.idem[key] = response{status, body}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (s *Server) create(r *http.Request) any {
	id := "pi_" + randomHex(12)
	amount, _ := strconv.ParseInt(r.PostForm.Get("amount"), 10, 64)
	md := map[string]string{}
	for k, v := range r.PostForm {
		if strings.HasPrefix(k, "metadata[") && strings.HasSuffix(k, "]") && len(v) > 0 {
			md[k[len("metadata["):len(k)-1]] = v[0]
		}
	}
	in := &intent{
		ID: id, Object: "payment_intent", Amount: amount, CaptureMethod: "manual",
		Created: time.Now().Unix(), Currency: r.PostForm.Get("currency"), Metadata: md,
		Status: string(payments.StatusRequiresPaymentMethod), secret: id + "_secret_" + randomHex(12),
	}
	s.intents[id] = in
	s.order = append(s.order, id)
	return in.view(true)
}

func (s *Server) list(r *http.Request) any {
	from, _ := strconv.ParseInt(r.Form.Get("created[gte]"), 10, 64)
	to, err := strconv.ParseInt(r.Form.Get("created[lte]"), 10, 64)
	if err != nil {
		to = 1 << 62
	}
	data := []any{}
	for _, id := range s.order {
		if in := s.intents[id]; in.Created >= from && in.Created <= to {
			data = append(data, in.view(false))
		}
	}
	return map[string]any{"object": "list", "data": data, "has_more": false, "url": "/v1/payment_intents"}
}

// act applies confirm, capture or cancel, and queues the webhook Stripe
// would send.
func (s *Server) act(in *intent, action string, r *http.Request) (out any, code, msg string) {
	wrong := func() (any, string, string) {
		return nil, "payment_intent_unexpected_state", "This PaymentIntent's status is " + in.Status
	}
	switch action {
	case "confirm":
		if r.PostForm.Get("client_secret") != in.secret {
			return nil, "resource_missing", "No such payment_intent"
		}
		if in.Status != string(payments.StatusRequiresPaymentMethod) {
			return wrong()
		}
		if r.PostForm.Get("payment_method") == CardDeclined {
			in.LastPaymentError = &paymentError{Type: "card_error", Code: payments.CodeCardDeclined, DeclineCode: "generic_decline", Message: "Your card was declined."}
			s.emit(in, payments.EventPaymentFailed)
			break
		}
		in.LastPaymentError = nil
		in.Status, in.AmountCapturable = string(payments.StatusRequiresCapture), in.Amount
		ch := "ch_" + randomHex(12)
		in.LatestCharge = &ch
		s.emit(in, payments.EventAmountCapturableUpdated)
	case "capture":
		if in.Status != string(payments.StatusRequiresCapture) {
			return wrong()
		}
		in.Status, in.AmountCapturable, in.AmountReceived = string(payments.StatusSucceeded), 0, in.Amount
		s.emit(in, payments.EventSucceeded)
	case "cancel":
		switch payments.IntentStatus(in.Status) {
		case payments.StatusSucceeded, payments.StatusCanceled:
			return wrong()
		}
		in.Status, in.AmountCapturable = string(payments.StatusCanceled), 0
		s.emit(in, payments.EventCanceled)
	default:
		return nil, "resource_missing", "Unrecognized request URL"
	}
	return in.view(action == "confirm"), "", ""
}

func (s *Server) refund(r *http.Request) (out any, code, msg string) {
	in, ok := s.intents[r.PostForm.Get("payment_intent")]
	if !ok || in.Status != string(payments.StatusSucceeded) {
		return nil, "charge_not_refundable", "This PaymentIntent has no refundable charge"
	}
	amount := in.Amount - in.refunded
	if a, err := strconv.ParseInt(r.PostForm.Get("amount"), 10, 64); err == nil {
		amount = a
	}
	if amount <= 0 || in.refunded+amount > in.Amount {
		return nil, "amount_too_large", "Refund amount is greater than the unrefunded amount"
	}
	in.refunded += amount
	ref := map[string]any{
		"id": "re_" + randomHex(12), "object": "refund", "amount": amount, "charge": *in.LatestCharge,
		"created": time.Now().Unix(), "currency": in.Currency, "metadata": map[string]string{},
		"payment_intent": in.ID, "status": "succeeded",
	}
	s.queue(in.ID, "charge.refunded", map[string]any{
		"id": *in.LatestCharge, "object": "charge", "amount": in.Amount, "amount_captured": in.Amount,
		"amount_refunded": in.refunded, "captured": true, "created": in.Created, "currency": in.Currency,
		"livemode": false, "metadata": in.Metadata, "paid": true, "payment_intent": in.ID,
		"refunded": in.refunded == in.Amount, "status": "succeeded",
		"refunds": map[string]any{"object": "list", "data": []any{ref}, "has_more": false, "url": "/v1/refunds"},
	})
	return ref, "", ""
}

// view is the intent as an answer (with its client secret when the caller
// may see it) or, secret false, as an event's object.
func (in *intent) view(secret bool) intent {
	v := *in
	v.ClientSecret = nil
	if secret {
		v.ClientSecret = &in.secret
	}
	return v
}

func (s *Server) emit(in *intent, eventType string) { s.queue(in.ID, eventType, in.view(false)) }

// queue puts an event on its intent's sender; with s.mu held, so the
// events of one intent are queued in the order they happened.
func (s *Server) queue(intentID, eventType string, object any) {
	payload, _ := json.Marshal(map[string]any{
		"id": "evt_" + randomHex(12), "object": "event", "api_version": "2024-06-20",
		"created": time.Now().Unix(), "data": map[string]any{"object": object}, "livemode": false,
		"pending_webhooks": 1, "request": map[string]any{"id": nil, "idempotency_key": nil}, "type": eventType,
	})
	h := fnv.New32a()
	_, _ = h.Write([]byte(intentID))
	s.queues[h.Sum32()%uint32(len(s.queues))] <- payload
}

func (s *Server) fail(w http.ResponseWriter, status int, typ, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"type": typ, "code": code, "message": msg}})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Confirm is the buyer's side: it confirms intentID with card
// (CardApproved or CardDeclined) and the client secret at base, as
// Stripe.js does. Any answer but 200 is a *ConfirmError.
func Confirm(ctx context.Context, c *http.Client, base, intentID, clientSecret, card string) error {
	form := url.Values{"client_secret": {clientSecret}, "payment_method": {card}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/payment_intents/"+intentID+"/confirm", strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusOK {
		_, _ = io.Copy(io.Discard, res.Body)
		return nil
	}
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.NewDecoder(res.Body).Decode(&body)
	return &ConfirmError{IntentID: intentID, Status: res.StatusCode, Code: body.Error.Code}
}

// ConfirmError is a confirmation the stand-in did not approve: 402
// card_declined for a declined card, 400 payment_intent_unexpected_state
// for an intent no longer awaiting a card (canceled, or confirmed
// already), 404 resource_missing for a wrong client secret.
type ConfirmError struct {
	IntentID string
	Status   int
	Code     string
}

func (e *ConfirmError) Error() string {
	return fmt.Sprintf("confirm %s: status %d %s", e.IntentID, e.Status, e.Code)
}
