package payments

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"github.com/stripe/stripe-go/v79"
	"github.com/stripe/stripe-go/v79/paymentintent"
	"github.com/stripe/stripe-go/v79/refund"
	"github.com/stripe/stripe-go/v79/webhook"
)

// StripeConfig configures NewStripe.
type StripeConfig struct {
	// SecretKey is the Stripe API key (sk_… or a restricted rk_…), from
	// STRIPE_SECRET_KEY. It is sent only in the Authorization header and
	// never appears in errors or logs. Required.
	SecretKey string
	// APIBase is the API's base URL, from STRIPE_API_BASE; tests point it
	// at stripe-mock. A trailing "/v1" is accepted. Defaults to
	// https://api.stripe.com.
	APIBase string
	// HTTPClient sends the requests. If its Timeout is zero, the client is
	// copied and given Timeout. Defaults to StripeHTTPClient().
	HTTPClient *http.Client
	// Timeout bounds each HTTP attempt; the caller's context bounds the
	// whole call, retries included. Defaults to 30s.
	Timeout time.Duration
	// MaxNetworkRetries is how often stripe-go repeats a request that got
	// no answer, a 409, a 5xx or a lock timeout, with the same idempotency
	// key and a short backoff (0.5s, 1s, … up to 5s). Zero means the
	// default; a negative value disables retries. Defaults to 2.
	MaxNetworkRetries int
	// Logger receives stripe-go's retry warnings (method and path only),
	// scoped with component=payments.stripe. Failures are returned, not
	// logged. Defaults to discarding logs.
	Logger *slog.Logger
}

func (c StripeConfig) withDefaults() StripeConfig {
	c.APIBase = cmp.Or(c.APIBase, stripe.APIURL)
	c.Timeout = cmp.Or(c.Timeout, 30*time.Second)
	c.MaxNetworkRetries = cmp.Or(c.MaxNetworkRetries, 2)
	if c.MaxNetworkRetries < 0 {
		c.MaxNetworkRetries = 0
	}
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	return c
}

// Validate reports a configuration NewStripe would refuse: no secret key,
// an API base that is not an absolute http(s) URL, or a negative timeout.
func (c StripeConfig) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.SecretKey == "" {
		errs = append(errs, errors.New("payments: StripeConfig.SecretKey is required (STRIPE_SECRET_KEY)"))
	}
	if u, err := url.Parse(c.APIBase); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("payments: StripeConfig.APIBase must be an absolute http(s) URL, got %q (STRIPE_API_BASE)", c.APIBase))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("payments: StripeConfig.Timeout must not be negative, got %s", c.Timeout))
	}
	return errors.Join(errs...)
}

// Stripe is the Provider backed by the Stripe API, through stripe-go with
// a client of its own (no package-level stripe.Key or backends), so
// several instances with different keys or base URLs may coexist.
//
// Every mutating request carries the caller's idempotency key; stripe-go
// repeats a request that got no answer, a 409, a 5xx or a lock timeout up
// to StripeConfig.MaxNetworkRetries times with that same key, so Stripe
// performs it at most once. What is left after those retries comes back as
// an *Error for the caller's own, slower retry.
type Stripe struct {
	intents paymentintent.Client
	refunds refund.Client
}

var _ Provider = (*Stripe)(nil)

// stripeIdleConns is how many idle connections to the Stripe API a
// process keeps: as many as the payment calls it makes at once (the
// payments and refund workers' batches, the saga's captures), so that over
// HTTP/1.1 a call finds a connection instead of dialing (and, against
// api.stripe.com, shaking hands over TLS) anew.
const stripeIdleConns = 64

// StripeHTTPClient returns the HTTP client NewStripe uses by default: its
// own transport (not http.DefaultTransport, whose two idle connections per
// host made every third concurrent call over HTTP/1.1 dial and close a
// connection of its own), HTTP/2 where the server offers it, the
// environment's proxy as before. Wrap it (telemetry.HTTPClient) rather than
// replace it.
func StripeHTTPClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = stripeIdleConns
	tr.MaxIdleConnsPerHost = stripeIdleConns
	return &http.Client{Transport: tr}
}

// NewStripe returns a Stripe provider. It makes no request; a wrong key
// shows on the first call as a permanent CodeAuthentication error.
func NewStripe(cfg StripeConfig) (*Stripe, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	hc := cfg.HTTPClient
	if hc == nil {
		hc = StripeHTTPClient()
	}
	if hc.Timeout == 0 {
		copied := *hc
		copied.Timeout = cfg.Timeout
		hc = &copied
	}
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		HTTPClient:        hc,
		LeveledLogger:     &stripeLogger{logger: cfg.Logger.With("component", "payments.stripe")},
		MaxNetworkRetries: stripe.Int64(int64(cfg.MaxNetworkRetries)),
		URL:               stripe.String(cfg.APIBase),
		EnableTelemetry:   stripe.Bool(false),
	})
	return &Stripe{
		intents: paymentintent.Client{B: backend, Key: cfg.SecretKey},
		refunds: refund.Client{B: backend, Key: cfg.SecretKey},
	}, nil
}

// CreateIntent implements Provider. It sends capture_method=manual and
// automatic_payment_methods[enabled]=true.
func (s *Stripe) CreateIntent(ctx context.Context, p CreateIntentParams) (Intent, error) {
	const op = "create intent"
	currency, metadata, err := ValidateCreate(p)
	if err != nil {
		return Intent{}, err
	}
	params := &stripe.PaymentIntentParams{
		Amount:                  stripe.Int64(p.AmountMinor),
		Currency:                stripe.String(currency),
		CaptureMethod:           stripe.String(string(stripe.PaymentIntentCaptureMethodManual)),
		AutomaticPaymentMethods: &stripe.PaymentIntentAutomaticPaymentMethodsParams{Enabled: stripe.Bool(true)},
		Metadata:                metadata,
	}
	params.Context = ctx
	params.SetIdempotencyKey(p.IdempotencyKey)
	pi, err := s.intents.New(params)
	if err != nil {
		return Intent{}, fromStripe(op, "", err)
	}
	return intentFromStripe(pi), nil
}

// Capture implements Provider.
func (s *Stripe) Capture(ctx context.Context, intentID, idempotencyKey string) (Intent, error) {
	return mutateIntent(ctx, "capture", intentID, idempotencyKey, &stripe.PaymentIntentCaptureParams{}, s.intents.Capture)
}

// Cancel implements Provider.
func (s *Stripe) Cancel(ctx context.Context, intentID, idempotencyKey string) (Intent, error) {
	return mutateIntent(ctx, "cancel", intentID, idempotencyKey, &stripe.PaymentIntentCancelParams{}, s.intents.Cancel)
}

// mutateIntent is a change op of intentID: it checks the intent id and
// idempotency key (ValidateMutation), has call send params with ctx and
// the key, and returns the intent Stripe answers, or its error as a
// payments error.
func mutateIntent[P stripe.ParamsContainer](ctx context.Context, op, intentID, idempotencyKey string, params P,
	call func(id string, params P) (*stripe.PaymentIntent, error),
) (Intent, error) {
	if err := ValidateMutation(op, intentID, idempotencyKey); err != nil {
		return Intent{}, err
	}
	p := params.GetParams()
	p.Context = ctx
	p.SetIdempotencyKey(idempotencyKey)
	pi, err := call(intentID, params)
	if err != nil {
		return Intent{}, fromStripe(op, intentID, err)
	}
	return intentFromStripe(pi), nil
}

// Refund implements Provider: a refund of amountMinor of the intent's
// charge, or of what is left of it.
func (s *Stripe) Refund(ctx context.Context, intentID string, amountMinor int64, idempotencyKey string) (Refund, error) {
	const op = "refund"
	if err := ValidateMutation(op, intentID, idempotencyKey); err != nil {
		return Refund{}, err
	}
	if amountMinor < 0 {
		return Refund{}, Invalid(op, intentID, "refund amount must not be negative")
	}
	params := &stripe.RefundParams{PaymentIntent: stripe.String(intentID)}
	if amountMinor > 0 {
		params.Amount = stripe.Int64(amountMinor)
	}
	params.Context = ctx
	params.SetIdempotencyKey(idempotencyKey)
	r, err := s.refunds.New(params)
	if err != nil {
		return Refund{}, fromStripe(op, intentID, err)
	}
	out := Refund{
		ID:          r.ID,
		IntentID:    intentID,
		AmountMinor: r.Amount,
		Currency:    string(r.Currency),
		Status:      string(r.Status),
		Created:     time.Unix(r.Created, 0).UTC(),
	}
	if r.PaymentIntent != nil && r.PaymentIntent.ID != "" {
		out.IntentID = r.PaymentIntent.ID
	}
	return out, nil
}

// Get implements Provider.
func (s *Stripe) Get(ctx context.Context, intentID string) (Intent, error) {
	const op = "get intent"
	if intentID == "" {
		return Intent{}, Invalid(op, "", "intent id is required")
	}
	params := &stripe.PaymentIntentParams{}
	params.Context = ctx
	params.AddExpand("latest_charge") // for amount_refunded
	pi, err := s.intents.Get(intentID, params)
	if err != nil {
		return Intent{}, fromStripe(op, intentID, err)
	}
	return intentFromStripe(pi), nil
}

// List implements Provider, following Stripe's pagination 100 intents at
// a time.
func (s *Stripe) List(ctx context.Context, createdFrom, createdTo time.Time) ([]Intent, error) {
	const op = "list intents"
	params := &stripe.PaymentIntentListParams{
		CreatedRange: &stripe.RangeQueryParams{
			GreaterThanOrEqual: createdFrom.Unix(),
			LesserThan:         createdTo.Unix(),
		},
	}
	params.Context = ctx
	params.Limit = stripe.Int64(100)
	params.AddExpand("data.latest_charge") // for amount_refunded
	var out []Intent
	it := s.intents.List(params)
	for it.Next() {
		out = append(out, intentFromStripe(it.PaymentIntent()))
	}
	if err := it.Err(); err != nil {
		return nil, fromStripe(op, "", err)
	}
	return out, nil
}

// intentFromStripe converts stripe-go's PaymentIntent.
func intentFromStripe(pi *stripe.PaymentIntent) Intent {
	in := Intent{
		ID:               pi.ID,
		ClientSecret:     pi.ClientSecret,
		Status:           IntentStatus(pi.Status),
		AmountMinor:      pi.Amount,
		Currency:         string(pi.Currency),
		AmountCapturable: pi.AmountCapturable,
		AmountReceived:   pi.AmountReceived,
		Metadata:         pi.Metadata,
		Created:          time.Unix(pi.Created, 0).UTC(),
	}
	if ch := pi.LatestCharge; ch != nil {
		in.AmountRefunded = ch.AmountRefunded
	}
	if e := pi.LastPaymentError; e != nil {
		in.LastPaymentError = &PaymentError{Code: string(e.Code), DeclineCode: string(e.DeclineCode), Message: e.Msg}
	}
	return in
}

// fromStripe turns an error from stripe-go into an *Error.
//
// It never wraps a *stripe.Error: that type's Error method marshals the
// whole error, including the PaymentIntent some errors carry, client
// secret and all. It copies the fields it needs instead.
func fromStripe(op, intentID string, err error) error {
	if se, ok := errors.AsType[*stripe.Error](err); ok {
		e := &Error{
			Op:          op,
			IntentID:    intentID,
			Code:        cmp.Or(string(se.Code), string(se.Type), CodeAPIError),
			HTTPStatus:  se.HTTPStatusCode,
			DeclineCode: string(se.DeclineCode),
			RequestID:   se.RequestID,
			Message:     se.Msg,
			Retryable:   stripeRetryable(se),
		}
		if se.Code == "" && (se.HTTPStatusCode == http.StatusUnauthorized || se.HTTPStatusCode == http.StatusForbidden) {
			e.Code = CodeAuthentication
		}
		e.Message = redactSecrets(e.Message)
		return e
	}
	if IsContextErr(err) {
		return TransportError(op, intentID, err)
	}
	if _, ok := errors.AsType[*url.Error](err); ok {
		return TransportError(op, intentID, err)
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return TransportError(op, intentID, err)
	}
	// Anything else is an answer stripe-go could not read (not JSON, or
	// JSON without an error object). Its text quotes the response body,
	// which may hold a client secret, so it is dropped. Whether Stripe
	// acted is unknown; the idempotency key makes a repeat safe.
	return &Error{Op: op, IntentID: intentID, Code: CodeAPIError, Retryable: true, Message: "unreadable response from Stripe"}
}

// secretPattern matches what must never reach an error or a log: API keys
// (sk_…, rk_…, in test or live mode), client secrets (pi_…_secret_…) and
// webhook secrets (whsec_…).
var secretPattern = regexp.MustCompile(`\b(?:[sr]k_(?:test|live)_|whsec_)[0-9A-Za-z_]+|\b[0-9A-Za-z]+_[0-9A-Za-z]+_secret_[0-9A-Za-z]+`)

// redactSecrets blanks out anything in a provider's message that looks
// like a secret. Stripe's messages quote the API key a request used, masked
// ("Invalid API Key provided: sk_test_****1234"); stripe-mock quotes it
// whole.
func redactSecrets(msg string) string {
	return secretPattern.ReplaceAllString(msg, "[redacted]")
}

// stripeRetryable decides whether a Stripe error response is worth
// repeating with the same key: Stripe's own Stripe-Should-Retry header
// when present, else 409 (idempotency key in use), 429 (rate limit, lock
// timeout) and 5xx.
func stripeRetryable(se *stripe.Error) bool {
	if se.LastResponse != nil {
		switch se.LastResponse.Header.Get("Stripe-Should-Retry") {
		case "true":
			return true
		case "false":
			return false
		}
	}
	switch se.Code {
	case stripe.ErrorCodeLockTimeout, stripe.ErrorCodeIdempotencyKeyInUse, stripe.ErrorCodeRateLimit:
		return true
	}
	if se.Type == stripe.ErrorTypeAPI {
		return true
	}
	return se.HTTPStatusCode == http.StatusConflict ||
		se.HTTPStatusCode == http.StatusTooManyRequests ||
		se.HTTPStatusCode >= http.StatusInternalServerError
}

// stripeLogger passes stripe-go's retry warnings to slog and drops the
// rest: its debug level logs whole response bodies (client secrets
// included), and its errors are returned to the caller, which logs them
// once.
type stripeLogger struct{ logger *slog.Logger }

func (l *stripeLogger) Debugf(string, ...any) {}
func (l *stripeLogger) Infof(string, ...any)  {}
func (l *stripeLogger) Errorf(string, ...any) {}
func (l *stripeLogger) Warnf(format string, v ...any) {
	l.logger.WarnContext(context.Background(), fmt.Sprintf(format, v...))
}

// SignWebhook returns the Stripe-Signature header value Stripe would send
// with payload at time t under secret:
// "t=<unix>,v1=<hex HMAC-SHA256(secret, "<unix>." + payload)>".
// stripe-go's webhook.ConstructEvent verifies it.
func SignWebhook(payload []byte, secret string, t time.Time) string {
	return "t=" + strconv.FormatInt(t.Unix(), 10) + ",v1=" + hex.EncodeToString(webhook.ComputeSignature(t, payload, secret))
}
