package sandbox

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"boxoffice/domain/payments"
	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
)

// Config configures New. The zero value is usable for a
// sandbox that only records its webhooks; RunWebhookSender needs
// WebhookURL and WebhookSecret.
type Config struct {
	// WebhookURL is where RunWebhookSender POSTs the sandbox's Stripe-format
	// events: the application's own Stripe ingress, …/v1/webhooks/stripe.
	// Defaults to none.
	WebhookURL string
	// WebhookSecret signs the events as Stripe signs them (whsec_…), from
	// STRIPE_WEBHOOK_SECRET; the ingress verifies them with the same
	// secret. Never logged. Required with WebhookURL.
	WebhookSecret string
	// WebhookRetryMin is the wait after a delivery's first failed attempt;
	// each further failure doubles it, up to WebhookRetryMax. Defaults to
	// 1s.
	WebhookRetryMin time.Duration
	// WebhookRetryMax caps the wait between attempts. A delivery is
	// retried until it gets a 2xx, however long that takes. Defaults to 1m.
	WebhookRetryMax time.Duration
	// WebhookPollInterval is how often the sender looks for due deliveries
	// queued by other processes; events this Sandbox queues wake its own
	// sender at once. Defaults to 100ms.
	WebhookPollInterval time.Duration
	// WebhookTimeout bounds each delivery attempt. Defaults to 10s.
	WebhookTimeout time.Duration
	// WebhookBatchSize is the most deliveries one claim leases. Defaults
	// to WebhookConcurrency, so that every leased delivery is in flight at
	// once and a sender that dies holds few of them.
	WebhookBatchSize int
	// WebhookConcurrency is how many deliveries of a batch are in flight
	// at once. Events about one PaymentIntent are always sent one after
	// another, oldest first; different intents' events go in parallel, as
	// Stripe's do. Defaults to 16.
	WebhookConcurrency int
	// HTTPClient sends the webhooks; redirects are never followed, as
	// Stripe does not follow them. Defaults to a client of its own.
	HTTPClient *http.Client
	// Logger receives the sandbox's logs, scoped with
	// component=payments.sandbox. Client secrets and webhook secrets are
	// never logged. Defaults to discarding logs.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.WebhookRetryMin = cmp.Or(c.WebhookRetryMin, time.Second)
	c.WebhookRetryMax = cmp.Or(c.WebhookRetryMax, time.Minute)
	c.WebhookPollInterval = cmp.Or(c.WebhookPollInterval, 100*time.Millisecond)
	c.WebhookTimeout = cmp.Or(c.WebhookTimeout, 10*time.Second)
	c.WebhookConcurrency = cmp.Or(c.WebhookConcurrency, 16)
	c.WebhookBatchSize = cmp.Or(c.WebhookBatchSize, c.WebhookConcurrency)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	return c
}

// Validate reports a configuration New would refuse: a WebhookURL
// that is not an absolute http(s) URL or comes without a WebhookSecret,
// negative durations or batch size, or WebhookRetryMax below
// WebhookRetryMin.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.WebhookURL != "" {
		if u, err := url.Parse(c.WebhookURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("payments: Config.WebhookURL must be an absolute http(s) URL, got %q", c.WebhookURL))
		}
		if c.WebhookSecret == "" {
			errs = append(errs, errors.New("payments: Config.WebhookSecret is required with WebhookURL (STRIPE_WEBHOOK_SECRET)"))
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"WebhookRetryMin", c.WebhookRetryMin}, {"WebhookRetryMax", c.WebhookRetryMax},
		{"WebhookPollInterval", c.WebhookPollInterval}, {"WebhookTimeout", c.WebhookTimeout},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("payments: Config.%s must not be negative, got %s", f.name, f.v))
		}
	}
	if c.WebhookRetryMax < c.WebhookRetryMin {
		errs = append(errs, fmt.Errorf("payments: Config.WebhookRetryMax (%s) must not be below WebhookRetryMin (%s)", c.WebhookRetryMax, c.WebhookRetryMin))
	}
	if c.WebhookBatchSize < 0 {
		errs = append(errs, fmt.Errorf("payments: Config.WebhookBatchSize must not be negative, got %d", c.WebhookBatchSize))
	}
	if c.WebhookConcurrency < 0 {
		errs = append(errs, fmt.Errorf("payments: Config.WebhookConcurrency must not be negative, got %d", c.WebhookConcurrency))
	}
	return errors.Join(errs...)
}

// ProviderRole is the cost role (db.WithRole) of the sandbox's own
// database work when Boxoffice calls it as its Provider (CreateIntent,
// Capture, Cancel, Refund, Get, List), whoever the caller: what a remote
// Stripe would spend on its servers, kept apart from the caller's role.
const ProviderRole = "sandbox provider calls"

// Operation names a kind of request in the sandbox's request log.
type Operation string

// The operations the sandbox logs.
const (
	OpCreate    Operation = "create"
	OpCapture   Operation = "capture"
	OpCancel    Operation = "cancel"
	OpRefund    Operation = "refund"
	OpAuthorize Operation = "authorize"
	OpDecline   Operation = "decline"
	OpChallenge Operation = "challenge"
)

// RequestCount is what the sandbox did with the requests of one
// operation on one intent.
type RequestCount struct {
	// Requests is how many requests arrived.
	Requests int64
	// Performed is how many changed the intent: for a capture, how many
	// times money was collected. Idempotency makes it at most 1 per key.
	Performed int64
	// Replayed is how many were answered with a stored response.
	Replayed int64
	// Rejected is how many failed: a wrong state, an unknown intent, a key
	// reused for another request.
	Rejected int64
}

// Sandbox is the Provider for development and tests. From the
// application's side it behaves like Stripe: the same statuses and
// transitions, the same idempotency (a key replays its first response,
// errors included, and performs nothing twice; a key reused for another
// request is refused), the same error codes, and the same webhooks, in
// Stripe's format and signed as Stripe signs them.
//
// Its state lives in PostgreSQL (the sandbox_* tables), so the API and the
// workers — separate processes, each with its own Sandbox — share it as
// they would share Stripe. Each operation is one transaction: the state
// change, the stored idempotent response, the request log and the webhook
// events it causes commit together or not at all.
//
// Where Stripe has a buyer confirm a card in the browser, the sandbox has
// Authorize and Decline. Webhooks are queued in sandbox_webhook_deliveries
// and sent by RunWebhookSender, retried until the receiver answers 2xx;
// they survive a crash, and may arrive twice or out of order, as Stripe's
// do.
//
// Unlike Stripe, the sandbox keeps idempotency keys forever, and its
// events leave the client secret out of the PaymentIntents they carry.
type Sandbox struct {
	pool   *pgxpool.Pool
	cfg    Config
	q      *sqlcgen.Queries
	logger *slog.Logger
	client *http.Client
	// wake tells this Sandbox's sender that an event was queued.
	wake chan struct{}
	// attemptedFunc, set only by tests (export_test.go), runs after the
	// outcome of each delivery attempt is recorded.
	attemptedFunc func(eventID string, delivered bool)
}

var _ payments.Provider = (*Sandbox)(nil)

// New returns a sandbox provider whose state is in pool's database,
// which must be migrated. It returns an error when cfg is invalid (see
// Config.Validate).
func New(pool *pgxpool.Pool, cfg Config) (*Sandbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	hc := &http.Client{}
	if cfg.HTTPClient != nil {
		copied := *cfg.HTTPClient
		hc = &copied
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Sandbox{
		pool:   pool,
		cfg:    cfg,
		q:      sqlcgen.New(),
		logger: cfg.Logger.With("component", "payments.sandbox"),
		client: hc,
		wake:   make(chan struct{}, 1),
	}, nil
}

// RequestCount reports the requests of op on the intent, for tests that
// assert how often the provider acted ("one capture at the provider").
func (s *Sandbox) RequestCount(ctx context.Context, intentID string, op Operation) (RequestCount, error) {
	row, err := s.q.SandboxRequestCount(ctx, s.read(), sqlcgen.SandboxRequestCountParams{PaymentIntentID: intentID, Operation: string(op)})
	if err != nil {
		return RequestCount{}, fmt.Errorf("count sandbox requests: %w", err)
	}
	return RequestCount{Requests: row.Requests, Performed: row.Performed, Replayed: row.Replayed, Rejected: row.Rejected}, nil
}

// CreateIntent implements Provider: the intent starts in
// requires_payment_method, waiting for the buyer (Authorize or Decline).
func (s *Sandbox) CreateIntent(ctx context.Context, p payments.CreateIntentParams) (payments.Intent, error) {
	const op = "create intent"
	ctx = db.WithRole(ctx, ProviderRole)
	currency, metadata, err := payments.ValidateCreate(p)
	if err != nil {
		return payments.Intent{}, err
	}
	hash := requestHash(OpCreate, map[string]any{"amount": p.AmountMinor, "currency": currency, "metadata": metadata})
	resp, err := s.idempotent(ctx, op, OpCreate, "", p.IdempotencyKey, hash, func(ctx context.Context, tx pgx.Tx) (response, error) {
		id := randomID("pi_", 24)
		md, err := json.Marshal(metadata)
		if err != nil {
			return response{}, fmt.Errorf("encode metadata: %w", err)
		}
		row, err := s.q.SandboxIntentInsert(ctx, tx, sqlcgen.SandboxIntentInsertParams{
			ID:           id,
			ClientSecret: id + "_secret_" + randomID("", 25),
			Amount:       p.AmountMinor,
			Currency:     currency,
			Status:       string(payments.StatusRequiresPaymentMethod),
			Metadata:     md,
		})
		if err != nil {
			return response{}, fmt.Errorf("insert intent: %w", err)
		}
		obj, err := intentObjectFromRow(row)
		if err != nil {
			return response{}, err
		}
		return response{Intent: &obj}, nil
	})
	if err != nil {
		return payments.Intent{}, err
	}
	return resp.intent(), nil
}

// Capture implements Provider.
func (s *Sandbox) Capture(ctx context.Context, intentID, idempotencyKey string) (payments.Intent, error) {
	const op = "capture"
	return s.moveIntent(ctx, op, OpCapture, intentID, idempotencyKey, payments.EventSucceeded,
		func(row sqlcgen.SandboxPaymentIntent) (sqlcgen.SandboxIntentUpdateParams, error) {
			if payments.IntentStatus(row.Status) != payments.StatusRequiresCapture {
				return sqlcgen.SandboxIntentUpdateParams{}, unexpectedState(op, intentID, fmt.Sprintf(
					"This PaymentIntent could not be captured because it has a status of %s. Only a PaymentIntent with one of the following statuses may be captured: requires_capture.", row.Status))
			}
			return sqlcgen.SandboxIntentUpdateParams{
				ID:             intentID,
				Status:         string(payments.StatusSucceeded),
				AmountReceived: row.Amount,
				LatestCharge:   row.LatestCharge,
			}, nil
		})
}

// cancelable are the statuses Stripe lets an intent be canceled from.
var cancelable = map[payments.IntentStatus]bool{
	payments.StatusRequiresPaymentMethod: true,
	payments.StatusRequiresConfirmation:  true,
	payments.StatusRequiresAction:        true,
	payments.StatusProcessing:            true,
	payments.StatusRequiresCapture:       true,
}

// Cancel implements Provider.
func (s *Sandbox) Cancel(ctx context.Context, intentID, idempotencyKey string) (payments.Intent, error) {
	const op = "cancel"
	return s.moveIntent(ctx, op, OpCancel, intentID, idempotencyKey, payments.EventCanceled,
		func(row sqlcgen.SandboxPaymentIntent) (sqlcgen.SandboxIntentUpdateParams, error) {
			if !cancelable[payments.IntentStatus(row.Status)] {
				return sqlcgen.SandboxIntentUpdateParams{}, unexpectedState(op, intentID, fmt.Sprintf(
					"You cannot cancel this PaymentIntent because it has a status of %s. Only a PaymentIntent with one of the following statuses may be canceled: requires_payment_method, requires_capture, requires_confirmation, requires_action, processing.", row.Status))
			}
			now := time.Now()
			return sqlcgen.SandboxIntentUpdateParams{
				ID:               intentID,
				Status:           string(payments.StatusCanceled),
				LatestCharge:     row.LatestCharge,
				LastPaymentError: row.LastPaymentError,
				CanceledAt:       &now,
			}, nil
		})
}

// moveIntent runs one keyed state change of an intent (capture, cancel)
// as Stripe's API does: the request validated, then under idempotencyKey
// (idempotent: a replay answers the first response, a refusal included),
// in one transaction, the intent locked, next deciding the change from its
// locked row (or refusing it), the row updated, and eventType's webhook
// queued with the change.
func (s *Sandbox) moveIntent(ctx context.Context, op string, kind Operation, intentID, idempotencyKey, eventType string,
	next func(row sqlcgen.SandboxPaymentIntent) (sqlcgen.SandboxIntentUpdateParams, error),
) (payments.Intent, error) {
	ctx = db.WithRole(ctx, ProviderRole)
	if err := payments.ValidateMutation(op, intentID, idempotencyKey); err != nil {
		return payments.Intent{}, err
	}
	hash := requestHash(kind, map[string]any{"intent": intentID})
	resp, err := s.idempotent(ctx, op, kind, intentID, idempotencyKey, hash, func(ctx context.Context, tx pgx.Tx) (response, error) {
		row, err := s.lockIntent(ctx, tx, op, intentID)
		if err != nil {
			return response{}, err
		}
		update, err := next(row)
		if err != nil {
			return response{}, err
		}
		row, err = s.q.SandboxIntentUpdate(ctx, tx, update)
		if err != nil {
			return response{}, fmt.Errorf("update intent: %w", err)
		}
		return s.intentChanged(ctx, tx, row, eventType, idempotencyKey)
	})
	if err != nil {
		return payments.Intent{}, err
	}
	return resp.intent(), nil
}

// Refund implements Provider.
func (s *Sandbox) Refund(ctx context.Context, intentID string, amountMinor int64, idempotencyKey string) (payments.Refund, error) {
	const op = "refund"
	ctx = db.WithRole(ctx, ProviderRole)
	if err := payments.ValidateMutation(op, intentID, idempotencyKey); err != nil {
		return payments.Refund{}, err
	}
	if amountMinor < 0 {
		return payments.Refund{}, payments.Invalid(op, intentID, "refund amount must not be negative")
	}
	hash := requestHash(OpRefund, map[string]any{"intent": intentID, "amount": amountMinor})
	resp, err := s.idempotent(ctx, op, OpRefund, intentID, idempotencyKey, hash, func(ctx context.Context, tx pgx.Tx) (response, error) {
		row, err := s.lockIntent(ctx, tx, op, intentID)
		if err != nil {
			return response{}, err
		}
		if payments.IntentStatus(row.Status) != payments.StatusSucceeded || row.LatestCharge == nil {
			return response{}, unexpectedState(op, intentID, "This PaymentIntent does not have a successful charge to refund.")
		}
		refunded, err := s.q.SandboxRefundTotal(ctx, tx, intentID)
		if err != nil {
			return response{}, fmt.Errorf("look up refunds: %w", err)
		}
		left := row.AmountReceived - refunded
		if left <= 0 {
			return response{}, &payments.Error{
				Op: op, IntentID: intentID, Code: payments.CodeChargeAlreadyRefunded, HTTPStatus: http.StatusBadRequest,
				Message: fmt.Sprintf("Charge %s has already been refunded.", *row.LatestCharge),
			}
		}
		amount := cmp.Or(amountMinor, left)
		if amount > left {
			return response{}, &payments.Error{
				Op: op, IntentID: intentID, Code: payments.CodeInvalidRequest, HTTPStatus: http.StatusBadRequest,
				Message: fmt.Sprintf("Refund amount (%d) is greater than unrefunded amount on charge (%d).", amount, left),
			}
		}
		ref, err := s.q.SandboxRefundInsert(ctx, tx, sqlcgen.SandboxRefundInsertParams{
			ID:              randomID("re_", 24),
			PaymentIntentID: intentID,
			Amount:          amount,
			Currency:        row.Currency,
		})
		if err != nil {
			return response{}, fmt.Errorf("insert refund: %w", err)
		}
		refObj := refundObjectFromRow(ref, *row.LatestCharge)
		charge, err := chargeObjectFromRows(row, &refObj, refunded+amount)
		if err != nil {
			return response{}, err
		}
		if err := s.enqueue(ctx, tx, payments.EventChargeRefunded, intentID, idempotencyKey, charge); err != nil {
			return response{}, err
		}
		return response{Refund: &refObj}, nil
	})
	if err != nil {
		return payments.Refund{}, err
	}
	return resp.refund(), nil
}

// Get implements Provider.
func (s *Sandbox) Get(ctx context.Context, intentID string) (payments.Intent, error) {
	const op = "get intent"
	ctx = db.WithRole(ctx, ProviderRole)
	row, err := s.q.SandboxIntentGet(ctx, s.read(), intentID)
	if err != nil {
		return payments.Intent{}, s.dbError(op, intentID, err)
	}
	obj, err := intentObjectFromRow(row)
	if err != nil {
		return payments.Intent{}, s.dbError(op, intentID, err)
	}
	return s.withRefunded(ctx, op, obj.intent())
}

// withRefunded sets in.AmountRefunded, as Stripe's expanded latest
// charge reports it.
func (s *Sandbox) withRefunded(ctx context.Context, op string, in payments.Intent) (payments.Intent, error) {
	if in.AmountReceived == 0 {
		return in, nil
	}
	refunded, err := s.q.SandboxRefundTotal(ctx, s.read(), in.ID)
	if err != nil {
		return payments.Intent{}, s.dbError(op, in.ID, err)
	}
	in.AmountRefunded = refunded
	return in, nil
}

// List implements Provider.
func (s *Sandbox) List(ctx context.Context, createdFrom, createdTo time.Time) ([]payments.Intent, error) {
	const op = "list intents"
	ctx = db.WithRole(ctx, ProviderRole)
	rows, err := s.q.SandboxIntentList(ctx, s.read(), sqlcgen.SandboxIntentListParams{
		CreatedFrom: time.Unix(createdFrom.Unix(), 0),
		CreatedTo:   time.Unix(createdTo.Unix(), 0),
	})
	if err != nil {
		return nil, s.dbError(op, "", err)
	}
	out := make([]payments.Intent, 0, len(rows))
	for _, row := range rows {
		obj, err := intentObjectFromRow(row)
		if err != nil {
			return nil, s.dbError(op, row.ID, err)
		}
		in, err := s.withRefunded(ctx, op, obj.intent())
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// Authorize is the buyer confirming the intent with a card that is
// approved, as Stripe.js would: an intent in requires_payment_method moves
// to requires_capture with its whole amount capturable, and the sandbox
// sends payment_intent.amount_capturable_updated. Any other status is a
// permanent *Error with code CodeUnexpectedState; an unknown intent one
// with CodeResourceMissing. It takes no idempotency key (the browser sends
// none); authorizing twice is refused as Stripe refuses confirming twice.
func (s *Sandbox) Authorize(ctx context.Context, intentID string) (payments.Intent, error) {
	return s.buyerAction(ctx, "authorize", OpAuthorize, intentID, func(ctx context.Context, tx pgx.Tx, row sqlcgen.SandboxPaymentIntent) (sqlcgen.SandboxPaymentIntent, string, error) {
		charge := randomID("ch_", 24)
		row, err := s.q.SandboxIntentUpdate(ctx, tx, sqlcgen.SandboxIntentUpdateParams{
			ID:               intentID,
			Status:           string(payments.StatusRequiresCapture),
			AmountCapturable: row.Amount,
			LatestCharge:     &charge,
		})
		return row, payments.EventAmountCapturableUpdated, err
	})
}

// Decline is the buyer confirming the intent with a card the issuer
// declines: the intent stays in requires_payment_method with a
// last_payment_error (card_declined, generic_decline), and the sandbox
// sends payment_intent.payment_failed. The buyer may then Authorize with
// another card. Errors as for Authorize.
func (s *Sandbox) Decline(ctx context.Context, intentID string) (payments.Intent, error) {
	return s.buyerAction(ctx, "decline", OpDecline, intentID, func(ctx context.Context, tx pgx.Tx, row sqlcgen.SandboxPaymentIntent) (sqlcgen.SandboxPaymentIntent, string, error) {
		lpe, err := json.Marshal(paymentErrorObject{
			Type: "card_error", Code: payments.CodeCardDeclined, DeclineCode: "generic_decline", Message: "Your card was declined.",
		})
		if err != nil {
			return row, "", fmt.Errorf("encode payment error: %w", err)
		}
		row, err = s.q.SandboxIntentUpdate(ctx, tx, sqlcgen.SandboxIntentUpdateParams{
			ID:               intentID,
			Status:           string(payments.StatusRequiresPaymentMethod),
			LastPaymentError: lpe,
		})
		return row, payments.EventPaymentFailed, err
	})
}

// Challenge is the buyer confirming the intent with a card whose issuer
// asks for 3-D Secure: the intent moves to requires_action and the sandbox
// sends payment_intent.requires_action. The buyer then passes the
// challenge (Authorize) or fails it (Decline). Errors as for Authorize.
func (s *Sandbox) Challenge(ctx context.Context, intentID string) (payments.Intent, error) {
	return s.buyerAction(ctx, "challenge", OpChallenge, intentID, func(ctx context.Context, tx pgx.Tx, _ sqlcgen.SandboxPaymentIntent) (sqlcgen.SandboxPaymentIntent, string, error) {
		row, err := s.q.SandboxIntentUpdate(ctx, tx, sqlcgen.SandboxIntentUpdateParams{
			ID:     intentID,
			Status: string(payments.StatusRequiresAction),
		})
		return row, payments.EventRequiresAction, err
	})
}

// buyerAction runs a buyer's confirmation of an intent, which must be in
// requires_payment_method (or requires_action, to answer a challenge): change updates the locked row and names the
// event to send. A refusal is logged as a rejected request and returned.
func (s *Sandbox) buyerAction(ctx context.Context, op string, kind Operation, intentID string, change confirmFunc) (payments.Intent, error) {
	if intentID == "" {
		return payments.Intent{}, payments.Invalid(op, "", "intent id is required")
	}
	var refusal *payments.Error
	obj, err := db.WithTxV(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) (intentObject, error) {
		refusal = nil
		outcome := "performed"
		obj, err := s.confirm(ctx, tx, op, intentID, change)
		if e, ok := errors.AsType[*payments.Error](err); ok && !e.Retryable {
			refusal, outcome = e, "rejected"
		} else if err != nil {
			return intentObject{}, err
		}
		if err := s.logRequest(ctx, tx, kind, intentID, "", outcome); err != nil {
			return intentObject{}, err
		}
		return obj, nil
	})
	if err != nil {
		return payments.Intent{}, s.dbError(op, intentID, err)
	}
	if refusal != nil {
		s.logger.DebugContext(ctx, "sandbox refused request", "op", op, "intent_id", intentID, "code", refusal.Code)
		return payments.Intent{}, refusal
	}
	s.poke()
	in := obj.intent()
	s.logger.DebugContext(ctx, "sandbox buyer action", "op", op, "intent", in)
	return in, nil
}

// confirmFunc applies a buyer's confirmation to the locked intent row and
// returns the updated row and the type of the event to send.
type confirmFunc func(ctx context.Context, tx pgx.Tx, row sqlcgen.SandboxPaymentIntent) (sqlcgen.SandboxPaymentIntent, string, error)

// confirm locks the intent, checks that it awaits a payment method, applies
// change and queues its event.
func (s *Sandbox) confirm(ctx context.Context, tx pgx.Tx, op, intentID string, change confirmFunc) (intentObject, error) {
	row, err := s.lockIntent(ctx, tx, op, intentID)
	if err != nil {
		return intentObject{}, err
	}
	st := payments.IntentStatus(row.Status)
	// A 3-D Secure challenge (Challenge) leaves the intent in
	// requires_action, which the buyer's answer (Authorize or Decline)
	// completes; a second challenge is refused, as is anything else.
	if st != payments.StatusRequiresPaymentMethod && (st != payments.StatusRequiresAction || op == "challenge") {
		return intentObject{}, unexpectedState(op, intentID, fmt.Sprintf(
			"This PaymentIntent's payment_method could not be updated because it has a status of %s.", row.Status))
	}
	row, eventType, err := change(ctx, tx, row)
	if err != nil {
		return intentObject{}, fmt.Errorf("update intent: %w", err)
	}
	resp, err := s.intentChanged(ctx, tx, row, eventType, "")
	if err != nil {
		return intentObject{}, err
	}
	return *resp.Intent, nil
}

// response is what an idempotent request answered, stored under its key
// and replayed to every later request with the key. Exactly one field is
// set.
type response struct {
	Intent *intentObject `json:"intent,omitempty"`
	Refund *refundObject `json:"refund,omitempty"`
	Error  *storedError  `json:"error,omitempty"`
}

// storedError is a refusal as stored for replay.
type storedError struct {
	Code       string `json:"code"`
	HTTPStatus int    `json:"status"`
	Message    string `json:"message"`
}

func (r response) intent() payments.Intent {
	if r.Intent == nil {
		return payments.Intent{}
	}
	return r.Intent.intent()
}

func (r response) refund() payments.Refund {
	if r.Refund == nil {
		return payments.Refund{}
	}
	return r.Refund.refund()
}

// idempotent runs one mutating request the way Stripe's idempotency layer
// does, in one transaction:
//
//   - It claims key. When another transaction holds an uncommitted claim
//     on it (a concurrent request with the key), the claim waits for that
//     one to commit and then finds the key bound.
//   - A bound key whose request (operation and parameters, as hash) matches
//     replays the stored response, performing nothing; one that does not
//     match is refused with CodeIdempotencyMismatch.
//   - A fresh key runs perform. Its response — or its refusal, a
//     non-retryable *Error — is stored under the key and the request
//     logged, all in perform's transaction. Any other error rolls it all
//     back, key included, so the request may be repeated. perform must
//     refuse before it writes anything, since a refusal commits.
//
// A stored refusal comes back as an *Error. intentID is "" for a create.
func (s *Sandbox) idempotent(ctx context.Context, op string, kind Operation, intentID, key string, hash []byte,
	perform func(ctx context.Context, tx pgx.Tx) (response, error),
) (response, error) {
	type result struct {
		resp     response
		outcome  string
		mismatch bool
	}
	res, err := db.WithTxV(ctx, s.pool, func(ctx context.Context, tx pgx.Tx) (result, error) {
		claimed, err := s.q.SandboxIdempotencyKeyClaim(ctx, tx, sqlcgen.SandboxIdempotencyKeyClaimParams{
			Key: key, Operation: string(kind), RequestHash: hash,
		})
		if err != nil {
			return result{}, fmt.Errorf("claim idempotency key: %w", err)
		}
		var res result
		if claimed {
			res.outcome = "performed"
			res.resp, err = perform(ctx, tx)
			if e, ok := errors.AsType[*payments.Error](err); ok && !e.Retryable {
				res.outcome = "rejected"
				res.resp = response{Error: &storedError{Code: e.Code, HTTPStatus: e.HTTPStatus, Message: e.Message}}
			} else if err != nil {
				return result{}, err
			}
			stored, err := json.Marshal(res.resp)
			if err != nil {
				return result{}, fmt.Errorf("encode response: %w", err)
			}
			if err := s.q.SandboxIdempotencyKeySetResponse(ctx, tx, sqlcgen.SandboxIdempotencyKeySetResponseParams{Key: key, Response: stored}); err != nil {
				return result{}, fmt.Errorf("store response: %w", err)
			}
		} else {
			row, err := s.q.SandboxIdempotencyKeyGet(ctx, tx, key)
			if err != nil {
				return result{}, fmt.Errorf("read idempotency key: %w", err)
			}
			switch {
			case row.Operation != string(kind) || !bytes.Equal(row.RequestHash, hash):
				res.outcome, res.mismatch = "rejected", true
			case row.Response == nil:
				// Cannot happen: the claiming transaction stores the
				// response before it commits.
				return result{}, errors.New("idempotency key bound without a response")
			default:
				res.outcome = "replayed"
				if err := json.Unmarshal(row.Response, &res.resp); err != nil {
					return result{}, fmt.Errorf("decode stored response: %w", err)
				}
			}
		}
		logged := intentID
		if logged == "" && res.resp.Intent != nil {
			logged = res.resp.Intent.ID
		}
		if err := s.logRequest(ctx, tx, kind, logged, key, res.outcome); err != nil {
			return result{}, err
		}
		return res, nil
	})
	if err != nil {
		return response{}, s.dbError(op, intentID, err)
	}
	if res.outcome == "performed" {
		s.poke()
	}
	s.logger.DebugContext(ctx, "sandbox request", "op", op, "intent_id", cmp.Or(intentID, res.resp.intent().ID), "outcome", res.outcome)
	if res.mismatch {
		return response{}, &payments.Error{
			Op: op, IntentID: intentID, Code: payments.CodeIdempotencyMismatch, HTTPStatus: http.StatusBadRequest,
			Message: fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '%s' if you meant to execute a different request.", key),
		}
	}
	if e := res.resp.Error; e != nil {
		return response{}, &payments.Error{Op: op, IntentID: intentID, Code: e.Code, HTTPStatus: e.HTTPStatus, Message: e.Message}
	}
	return res.resp, nil
}

// lockIntent reads the intent and locks it for the transaction. An unknown
// intent is a permanent CodeResourceMissing *Error.
// read is the pool for sqlcgen's reads, its errors interpreted
// (db.Interpreting): a missing row is db.ErrNotFound.
func (s *Sandbox) read() db.DBTX { return db.Interpreting(s.pool) }

func (s *Sandbox) lockIntent(ctx context.Context, tx pgx.Tx, op, intentID string) (sqlcgen.SandboxPaymentIntent, error) {
	row, err := s.q.SandboxIntentGetForUpdate(ctx, db.InterpretingTx(tx), intentID)
	if errors.Is(err, db.ErrNotFound) {
		return row, missing(op, intentID)
	}
	if err != nil {
		return row, fmt.Errorf("lock intent: %w", err)
	}
	return row, nil
}

// intentChanged queues the webhook event for a changed intent and returns
// the intent as the response.
func (s *Sandbox) intentChanged(ctx context.Context, tx pgx.Tx, row sqlcgen.SandboxPaymentIntent, eventType, key string) (response, error) {
	obj, err := intentObjectFromRow(row)
	if err != nil {
		return response{}, err
	}
	// Events leave the client secret out: the ingress has no use for it,
	// and it would otherwise sit in every delivery row.
	event := obj
	event.ClientSecret = nil
	if err := s.enqueue(ctx, tx, eventType, row.ID, key, event); err != nil {
		return response{}, err
	}
	return response{Intent: &obj}, nil
}

func (s *Sandbox) logRequest(ctx context.Context, tx pgx.Tx, kind Operation, intentID, key, outcome string) error {
	p := sqlcgen.SandboxRequestInsertParams{Operation: string(kind), Outcome: outcome}
	if intentID != "" {
		p.PaymentIntentID = &intentID
	}
	if key != "" {
		p.IdempotencyKey = &key
	}
	if err := s.q.SandboxRequestInsert(ctx, tx, p); err != nil {
		return fmt.Errorf("log request: %w", err)
	}
	return nil
}

// dbError turns a failure of the sandbox's own machinery into what Stripe
// would answer: a retryable error, a 5xx or no answer. *Errors pass
// through.
func (s *Sandbox) dbError(op, intentID string, err error) error {
	if e, ok := errors.AsType[*payments.Error](err); ok {
		return e
	}
	if errors.Is(err, db.ErrNotFound) {
		return missing(op, intentID)
	}
	if payments.IsContextErr(err) {
		return payments.TransportError(op, intentID, err)
	}
	return &payments.Error{Op: op, IntentID: intentID, Code: payments.CodeAPIError, Retryable: true, HTTPStatus: http.StatusInternalServerError, Err: err}
}

func missing(op, intentID string) *payments.Error {
	return &payments.Error{
		Op: op, IntentID: intentID, Code: payments.CodeResourceMissing, HTTPStatus: http.StatusNotFound,
		Message: fmt.Sprintf("No such payment_intent: '%s'", intentID),
	}
}

func unexpectedState(op, intentID, msg string) *payments.Error {
	return &payments.Error{Op: op, IntentID: intentID, Code: payments.CodeUnexpectedState, HTTPStatus: http.StatusBadRequest, Message: msg}
}

// requestHash fingerprints a request's operation and parameters, to tell
// a repeat from another request under the same key.
func requestHash(kind Operation, params map[string]any) []byte {
	b, err := json.Marshal(params) // maps marshal with sorted keys
	if err != nil {
		panic(fmt.Sprintf("payments: hash request: %v", err)) // only strings and numbers
	}
	h := sha256.New()
	h.Write([]byte(kind))
	h.Write([]byte{0})
	h.Write(b)
	return h.Sum(nil)
}

// idAlphabet is what Stripe ids are made of.
const idAlphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// randomID returns prefix followed by n random characters of idAlphabet,
// like Stripe's ids (pi_…, ch_…, re_…, evt_…).
func randomID(prefix string, n int) string {
	out := make([]byte, 0, len(prefix)+n)
	out = append(out, prefix...)
	var buf [64]byte
	for len(out) < cap(out) {
		_, _ = rand.Read(buf[:]) // crypto/rand.Read never fails
		for _, c := range buf {
			// 248 = 4 × 62: rejecting the bytes above keeps every
			// character equally likely.
			if c < 248 && len(out) < cap(out) {
				out = append(out, idAlphabet[c%62])
			}
		}
	}
	return string(out)
}
