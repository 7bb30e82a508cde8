package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stripe/stripe-go/v79"

	"boxoffice/domain/payments"
	"boxoffice/platform/backoff"
	"boxoffice/platform/db"
	"boxoffice/platform/text"
	"boxoffice/sqlcgen"
)

// The Stripe objects the sandbox answers with and sends in its events, in
// Stripe's JSON shape (a subset of the fields, enough for stripe-go to
// decode them into stripe.PaymentIntent, stripe.Charge, stripe.Refund and
// stripe.Event).

// intentObject is a PaymentIntent. ClientSecret is nil in events.
type intentObject struct {
	ID                 string              `json:"id"`
	Object             string              `json:"object"`
	Amount             int64               `json:"amount"`
	AmountCapturable   int64               `json:"amount_capturable"`
	AmountReceived     int64               `json:"amount_received"`
	CanceledAt         *int64              `json:"canceled_at"`
	CancellationReason *string             `json:"cancellation_reason"`
	CaptureMethod      string              `json:"capture_method"`
	ClientSecret       *string             `json:"client_secret"`
	ConfirmationMethod string              `json:"confirmation_method"`
	Created            int64               `json:"created"`
	Currency           string              `json:"currency"`
	LastPaymentError   *paymentErrorObject `json:"last_payment_error"`
	LatestCharge       *string             `json:"latest_charge"`
	Livemode           bool                `json:"livemode"`
	Metadata           map[string]string   `json:"metadata"`
	PaymentMethodTypes []string            `json:"payment_method_types"`
	Status             string              `json:"status"`
}

// paymentErrorObject is a PaymentIntent's last_payment_error.
type paymentErrorObject struct {
	Type        string `json:"type"`
	Code        string `json:"code,omitempty"`
	DeclineCode string `json:"decline_code,omitempty"`
	Message     string `json:"message,omitempty"`
}

// refundObject is a Refund.
type refundObject struct {
	ID            string            `json:"id"`
	Object        string            `json:"object"`
	Amount        int64             `json:"amount"`
	Charge        string            `json:"charge"`
	Created       int64             `json:"created"`
	Currency      string            `json:"currency"`
	Metadata      map[string]string `json:"metadata"`
	PaymentIntent string            `json:"payment_intent"`
	Status        string            `json:"status"`
}

// chargeObject is a Charge, as charge.refunded carries it.
type chargeObject struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	Captured       bool              `json:"captured"`
	Created        int64             `json:"created"`
	Currency       string            `json:"currency"`
	Livemode       bool              `json:"livemode"`
	Metadata       map[string]string `json:"metadata"`
	Paid           bool              `json:"paid"`
	PaymentIntent  string            `json:"payment_intent"`
	Refunded       bool              `json:"refunded"`
	Refunds        refundList        `json:"refunds"`
	Status         string            `json:"status"`
}

type refundList struct {
	Object  string         `json:"object"`
	Data    []refundObject `json:"data"`
	HasMore bool           `json:"has_more"`
	URL     string         `json:"url"`
}

// eventObject is an Event, as Stripe POSTs it to a webhook endpoint.
type eventObject struct {
	ID              string       `json:"id"`
	Object          string       `json:"object"`
	APIVersion      string       `json:"api_version"`
	Created         int64        `json:"created"`
	Data            eventData    `json:"data"`
	Livemode        bool         `json:"livemode"`
	PendingWebhooks int          `json:"pending_webhooks"`
	Request         eventRequest `json:"request"`
	Type            string       `json:"type"`
}

type eventData struct {
	Object any `json:"object"`
}

type eventRequest struct {
	ID             *string `json:"id"`
	IdempotencyKey *string `json:"idempotency_key"`
}

func intentObjectFromRow(row sqlcgen.SandboxPaymentIntent) (intentObject, error) {
	obj := intentObject{
		ID:                 row.ID,
		Object:             "payment_intent",
		Amount:             row.Amount,
		AmountCapturable:   row.AmountCapturable,
		AmountReceived:     row.AmountReceived,
		CaptureMethod:      "manual",
		ClientSecret:       &row.ClientSecret,
		ConfirmationMethod: "automatic",
		Created:            row.CreatedAt.Unix(),
		Currency:           row.Currency,
		LatestCharge:       row.LatestCharge,
		Metadata:           map[string]string{},
		PaymentMethodTypes: []string{"card"},
		Status:             row.Status,
	}
	if row.CanceledAt != nil {
		t := row.CanceledAt.Unix()
		obj.CanceledAt = &t
	}
	if err := json.Unmarshal(row.Metadata, &obj.Metadata); err != nil {
		return intentObject{}, fmt.Errorf("decode metadata of %s: %w", row.ID, err)
	}
	if row.LastPaymentError != nil {
		obj.LastPaymentError = &paymentErrorObject{}
		if err := json.Unmarshal(row.LastPaymentError, obj.LastPaymentError); err != nil {
			return intentObject{}, fmt.Errorf("decode last payment error of %s: %w", row.ID, err)
		}
	}
	return obj, nil
}

func (o intentObject) intent() payments.Intent {
	in := payments.Intent{
		ID:               o.ID,
		Status:           payments.IntentStatus(o.Status),
		AmountMinor:      o.Amount,
		Currency:         o.Currency,
		AmountCapturable: o.AmountCapturable,
		AmountReceived:   o.AmountReceived,
		Metadata:         o.Metadata,
		Created:          time.Unix(o.Created, 0).UTC(),
	}
	if o.ClientSecret != nil {
		in.ClientSecret = *o.ClientSecret
	}
	if e := o.LastPaymentError; e != nil {
		in.LastPaymentError = &payments.PaymentError{Code: e.Code, DeclineCode: e.DeclineCode, Message: e.Message}
	}
	return in
}

func refundObjectFromRow(row sqlcgen.SandboxRefund, chargeID string) refundObject {
	return refundObject{
		ID:            row.ID,
		Object:        "refund",
		Amount:        row.Amount,
		Charge:        chargeID,
		Created:       row.CreatedAt.Unix(),
		Currency:      row.Currency,
		Metadata:      map[string]string{},
		PaymentIntent: row.PaymentIntentID,
		Status:        "succeeded",
	}
}

func (o refundObject) refund() payments.Refund {
	return payments.Refund{
		ID:          o.ID,
		IntentID:    o.PaymentIntent,
		AmountMinor: o.Amount,
		Currency:    o.Currency,
		Status:      o.Status,
		Created:     time.Unix(o.Created, 0).UTC(),
	}
}

// chargeObjectFromRows is the intent's (captured) charge after ref, with
// refunded refunded in all (ref included). Like Stripe, the charge carries
// the intent's metadata.
func chargeObjectFromRows(row sqlcgen.SandboxPaymentIntent, ref *refundObject, refunded int64) (chargeObject, error) {
	pi, err := intentObjectFromRow(row)
	if err != nil {
		return chargeObject{}, err
	}
	ch := chargeObject{
		ID:             *row.LatestCharge,
		Object:         "charge",
		Amount:         row.Amount,
		AmountCaptured: row.AmountReceived,
		Captured:       true,
		Created:        pi.Created,
		Currency:       row.Currency,
		Metadata:       pi.Metadata,
		Paid:           true,
		PaymentIntent:  row.ID,
		Refunds:        refundList{Object: "list", Data: []refundObject{}, URL: "/v1/charges/" + *row.LatestCharge + "/refunds"},
		Status:         "succeeded",
	}
	if ref != nil {
		ch.AmountRefunded = refunded
		ch.Refunded = refunded >= row.AmountReceived
		ch.Refunds.Data = append(ch.Refunds.Data, *ref)
	}
	return ch, nil
}

// enqueue queues the Stripe event of type eventType about object in tx, for
// RunWebhookSender to deliver. key is the idempotency key of the request
// that caused it, or "" for a buyer action.
func (s *Sandbox) enqueue(ctx context.Context, tx pgx.Tx, eventType, intentID, key string, object any) error {
	ev := eventObject{
		ID:              randomID("evt_", 24),
		Object:          "event",
		APIVersion:      stripe.APIVersion,
		Created:         time.Now().Unix(),
		Data:            eventData{Object: object},
		PendingWebhooks: 1,
		Type:            eventType,
	}
	reqID := randomID("req_", 14)
	ev.Request.ID = &reqID
	if key != "" {
		ev.Request.IdempotencyKey = &key
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode %s event: %w", eventType, err)
	}
	err = s.q.SandboxWebhookInsert(ctx, tx, sqlcgen.SandboxWebhookInsertParams{
		EventID: ev.ID, EventType: eventType, PaymentIntentID: intentID, Payload: payload,
	})
	if err != nil {
		return fmt.Errorf("queue %s event: %w", eventType, err)
	}
	return nil
}

// poke wakes this Sandbox's webhook sender, if it runs, after a commit
// that queued events.
func (s *Sandbox) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// WebhookEvent is one event the sandbox queued, and how its
// delivery went.
type WebhookEvent struct {
	// EventID is the event's id, evt_….
	EventID string
	// Type is the event's type, e.g. EventSucceeded.
	Type string
	// Attempts is how many deliveries were attempted.
	Attempts int
	// Delivered reports whether the receiver has answered 2xx.
	Delivered bool
}

// WebhookEvents lists the events the sandbox queued about an intent,
// oldest first, for tests.
func (s *Sandbox) WebhookEvents(ctx context.Context, intentID string) ([]WebhookEvent, error) {
	rows, err := s.q.SandboxWebhookListByIntent(ctx, s.pool, intentID)
	if err != nil {
		return nil, fmt.Errorf("list sandbox webhook events: %w", err)
	}
	out := make([]WebhookEvent, 0, len(rows))
	for _, r := range rows {
		out = append(out, WebhookEvent{EventID: r.EventID, Type: r.EventType, Attempts: int(r.Attempts), Delivered: r.DeliveredAt != nil})
	}
	return out, nil
}

// RunWebhookSender delivers the events queued by every Sandbox sharing the
// database, until ctx is done; then it returns nil. It fails at once
// without a WebhookURL and WebhookSecret.
//
// Each event is POSTed to WebhookURL with its fixed JSON body, a
// Content-Type of application/json and a Stripe-Signature header computed
// as Stripe computes it, afresh for each attempt:
// "t=<unix>,v1=<hex HMAC-SHA256(secret, t + "." + body)>", which
// stripe-go's webhook.ConstructEvent accepts. A 2xx marks it delivered;
// anything else (another status, a redirect, a timeout, no connection) is
// retried after WebhookRetryMin, doubling up to WebhookRetryMax, with
// jitter, until a 2xx. Up to WebhookConcurrency events are in flight at
// once, each intent's oldest first; a retried one is overtaken by later
// ones.
//
// Senders in several processes may run at once: each leases the events it
// sends, and an event whose sender died is sent again once its lease
// expires. An event may therefore arrive more than once, as Stripe's may;
// the receiver dedupes by event id.
func (s *Sandbox) RunWebhookSender(ctx context.Context) error {
	if s.cfg.WebhookURL == "" || s.cfg.WebhookSecret == "" {
		return errors.New("payments: the sandbox webhook sender needs Config.WebhookURL and WebhookSecret")
	}
	s.logger.InfoContext(ctx, "sandbox webhook sender started", "url", s.cfg.WebhookURL)
	poll := time.NewTicker(s.cfg.WebhookPollInterval)
	defer poll.Stop()
	failing := false // log a claim failure once, not at every poll
	for {
		n, err := s.sendDue(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil && !failing:
			s.logger.WarnContext(ctx, "sandbox webhook sender cannot claim deliveries; retrying", "error", err)
		case err == nil && failing:
			s.logger.InfoContext(ctx, "sandbox webhook sender claims deliveries again")
		}
		failing = err != nil
		if err == nil && n == s.cfg.WebhookBatchSize {
			continue // there may be more due at once
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.wake:
		case <-poll.C:
		}
	}
}

// sendDue claims the due events and attempts each once, returning how
// many it claimed: one transaction claims the batch, one records how every
// attempt of it went (settle), however many events it holds. Up to WebhookConcurrency intents' events are in flight
// at once; one intent's events go one after another, oldest first, so a
// receiver sees an intent's history in order unless a delivery fails (a
// retried event is overtaken by later ones, as with Stripe).
func (s *Sandbox) sendDue(ctx context.Context) (int, error) {
	// The lease should outlast sending the batch: every slot sends its
	// share one after another, and one intent may hold another event or
	// two. It is also how long the events of a sender that died wait to be
	// sent again, so it is not the worst case: a batch that outlives it is
	// sent again by another sender, a duplicate the receiver dedupes.
	perSlot := (s.cfg.WebhookBatchSize+s.cfg.WebhookConcurrency-1)/s.cfg.WebhookConcurrency + 2
	lease := s.cfg.WebhookTimeout*time.Duration(perSlot) + 10*time.Second
	claimCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	rows, err := s.q.SandboxWebhookClaim(claimCtx, s.pool, sqlcgen.SandboxWebhookClaimParams{
		Lease: lease, MaxRows: int32(s.cfg.WebhookBatchSize),
	})
	cancel()
	if err != nil {
		return 0, fmt.Errorf("claim webhook deliveries: %w", err)
	}
	slices.SortFunc(rows, func(a, b sqlcgen.SandboxWebhookClaimRow) int { return cmp.Compare(a.Seq, b.Seq) })
	// Group by intent, keeping the oldest intent's group first.
	var groups [][]sqlcgen.SandboxWebhookClaimRow
	index := make(map[string]int, len(rows))
	for _, row := range rows {
		i, ok := index[row.PaymentIntentID]
		if !ok {
			i = len(groups)
			index[row.PaymentIntentID] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], row)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes = make([]attemptOutcome, 0, len(rows))
	)
	slots := make(chan struct{}, s.cfg.WebhookConcurrency)
	for _, group := range groups {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			for _, row := range group {
				o := attemptOutcome{row: row, failure: s.post(ctx, row.Payload)}
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	s.settle(ctx, outcomes)
	return len(rows), nil
}

// attemptOutcome is how one attempt of a batch went: failure is "" for a
// 2xx, else why it failed.
type attemptOutcome struct {
	row     sqlcgen.SandboxWebhookClaimRow
	failure string
}

// settle records the outcomes of one batch's attempts in one transaction:
// the delivered events, and for the others their error and when they are
// due again. Until then the batch's lease keeps every one of them from
// being claimed. Should settling fail, the lease runs out and the batch is
// sent again: duplicates, which the receiver dedupes by event id.
func (s *Sandbox) settle(ctx context.Context, outcomes []attemptOutcome) {
	if len(outcomes) == 0 {
		return
	}
	var (
		delivered []string
		retries   sqlcgen.SandboxWebhookSettleRetriesParams
		backoffs  = make(map[string]time.Duration)
	)
	stopping := ctx.Err() != nil
	for i, o := range outcomes {
		if o.failure == "" {
			delivered = append(delivered, o.row.EventID)
			continue
		}
		backoff := s.backoff(int(o.row.Attempts))
		if stopping {
			// Stopping: hand the event to the next sender at once.
			backoff, outcomes[i].failure = 0, "sender stopped"
		}
		backoffs[o.row.EventID] = backoff
		retries.EventIds = append(retries.EventIds, o.row.EventID)
		retries.BackoffMs = append(retries.BackoffMs, backoff.Milliseconds())
		retries.LastErrors = append(retries.LastErrors, outcomes[i].failure)
	}
	// Record the outcomes even when ctx ended during the POSTs.
	dbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := db.WithTx(dbCtx, s.pool, func(ctx context.Context, tx pgx.Tx) error {
		if len(delivered) > 0 {
			if err := s.q.SandboxWebhookSettleDelivered(ctx, tx, delivered); err != nil {
				return fmt.Errorf("mark delivered: %w", err)
			}
		}
		if len(retries.EventIds) > 0 {
			if err := s.q.SandboxWebhookSettleRetries(ctx, tx, retries); err != nil {
				return fmt.Errorf("schedule retries: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		// The lease runs out and the batch is sent again.
		s.logger.WarnContext(ctx, "sandbox webhook outcomes not recorded", "events", len(outcomes), "error", err)
	}
	for _, o := range outcomes {
		logger := s.logger.With("event_id", o.row.EventID, "event_type", o.row.EventType, "attempt", o.row.Attempts)
		switch {
		case err != nil:
		case o.failure == "":
			logger.DebugContext(ctx, "sandbox webhook delivered")
		case !stopping:
			logger.WarnContext(ctx, "sandbox webhook delivery failed", "reason", o.failure, "retry_in", backoffs[o.row.EventID])
		}
		if s.attemptedFunc != nil {
			s.attemptedFunc(o.row.EventID, o.failure == "")
		}
	}
}

// post sends payload, signed, to the webhook URL. It returns "" on a 2xx,
// else why the attempt failed, in words that quote no response body.
func (s *Sandbox) post(ctx context.Context, payload []byte) string {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WebhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.cfg.WebhookURL, bytes.NewReader(payload))
	if err != nil {
		return "build request: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	req.Header.Set("Stripe-Signature", payments.SignWebhook(payload, s.cfg.WebhookSecret, time.Now()))
	resp, err := s.client.Do(req)
	if err != nil {
		return text.Storable(err.Error(), 200)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return "status " + strconv.Itoa(resp.StatusCode)
	}
	return ""
}

// backoff is the wait before attempt n+1, after n failed attempts:
// WebhookRetryMin doubled n-1 times, capped at WebhookRetryMax, minus up
// to 20% jitter (so it never exceeds WebhookRetryMax).
func (s *Sandbox) backoff(n int) time.Duration {
	return backoff.Policy{
		Base: s.cfg.WebhookRetryMin, Max: s.cfg.WebhookRetryMax, Jitter: backoff.Jitter{Below: 0.2},
	}.Delay(n)
}
