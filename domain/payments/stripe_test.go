package payments_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"boxoffice/domain/payments"
	"boxoffice/domain/payments/stripemocktest"
	"boxoffice/testkit"
)

// testSecretKey is a key stripe-mock accepts: sk_test_ and letters or digits.
const testSecretKey = "sk_test_boxoffice123"

// recordedRequest is one HTTP request the Stripe client sent.
type recordedRequest struct {
	method string
	path   string
	query  url.Values
	header http.Header
	form   url.Values
}

// recorder is a RoundTripper that records each request and then hands it
// to next (by default the real transport). mutate, if set, may rewrite the
// form body before it is sent.
type recorder struct {
	next   http.RoundTripper
	mutate func(form url.Values)

	mu   sync.Mutex
	reqs []recordedRequest
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := recordedRequest{method: req.Method, path: req.URL.Path, query: req.URL.Query(), header: req.Header.Clone(), form: url.Values{}}
	if req.Body != nil {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		_ = req.Body.Close()
		if rec.form, err = url.ParseQuery(string(body)); err != nil {
			return nil, err
		}
		if r.mutate != nil {
			r.mutate(rec.form)
			body = []byte(rec.form.Encode())
			req = req.Clone(req.Context())
			req.ContentLength = int64(len(body))
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, rec)
	r.mu.Unlock()
	next := r.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(req)
}

func (r *recorder) requests() []recordedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recordedRequest(nil), r.reqs...)
}

// only returns the one request recorded.
func (r *recorder) only(t *testing.T) recordedRequest {
	t.Helper()
	reqs := r.requests()
	require.Len(t, reqs, 1)
	return reqs[0]
}

func newStripe(t *testing.T, base string, rt http.RoundTripper, retries int) *payments.Stripe {
	t.Helper()
	s, err := payments.NewStripe(payments.StripeConfig{
		SecretKey:         testSecretKey,
		APIBase:           base,
		HTTPClient:        &http.Client{Transport: rt},
		Timeout:           10 * time.Second,
		MaxNetworkRetries: retries,
		Logger:            testkit.NewLog(t, testkit.Text()).Logger,
	})
	require.NoError(t, err)
	return s
}

func TestStripe(t *testing.T) {
	t.Parallel()
	// stripe-mock is stateless, so one serves every subtest.
	base := stripemocktest.Start(t)

	setup := func(t *testing.T) (*payments.Stripe, *recorder) {
		t.Helper()
		rec := &recorder{}
		return newStripe(t, base, rec, 0), rec
	}

	requireAuthorized := func(t *testing.T, req recordedRequest) {
		t.Helper()
		require.Equal(t, "Bearer "+testSecretKey, req.header.Get("Authorization"))
		require.NotEmpty(t, req.header.Get("Stripe-Version"))
	}

	t.Run("CreateIntentSendsManualCaptureAndIdempotencyKey", func(t *testing.T) {
		t.Parallel()
		s, rec := setup(t)
		orderID := uuid.New()
		key := "authorize:" + uuid.NewString()
		in, err := s.CreateIntent(t.Context(), payments.CreateIntentParams{
			OrderID: orderID, AmountMinor: 2500, Currency: "EUR", IdempotencyKey: key,
			Metadata: map[string]string{"hold_id": "h1"},
		})
		require.NoError(t, err)

		req := rec.only(t)
		require.Equal(t, http.MethodPost, req.method)
		require.Equal(t, "/v1/payment_intents", req.path)
		require.Equal(t, key, req.header.Get("Idempotency-Key"))
		requireAuthorized(t, req)
		require.Equal(t, url.Values{
			"amount":                             {"2500"},
			"currency":                           {"eur"},
			"capture_method":                     {"manual"},
			"automatic_payment_methods[enabled]": {"true"},
			"metadata[order_id]":                 {orderID.String()},
			"metadata[hold_id]":                  {"h1"},
		}, req.form)

		// stripe-mock answers with a fixture that echoes amount and currency.
		require.True(t, strings.HasPrefix(in.ID, "pi_"), in.ID)
		require.NotEmpty(t, in.ClientSecret)
		require.Equal(t, int64(2500), in.AmountMinor)
		require.Equal(t, "eur", in.Currency)
		require.Equal(t, payments.StatusRequiresPaymentMethod, in.Status)
		require.False(t, in.Created.IsZero())
	})

	t.Run("CaptureCancelRefundSendTheirKeys", func(t *testing.T) {
		t.Parallel()
		s, rec := setup(t)
		ctx := t.Context()

		in, err := s.Capture(ctx, "pi_123", "capture:o1")
		require.NoError(t, err)
		require.Equal(t, "pi_123", in.ID)
		in, err = s.Cancel(ctx, "pi_123", "cancel:o1")
		require.NoError(t, err)
		require.Equal(t, "pi_123", in.ID)
		ref, err := s.Refund(ctx, "pi_123", 0, "refund:o1")
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(ref.ID, "re_"), ref.ID)
		require.Equal(t, "pi_123", ref.IntentID)
		require.NotEmpty(t, ref.Status)

		reqs := rec.requests()
		require.Len(t, reqs, 3)
		for i, want := range []struct{ path, key string }{
			{"/v1/payment_intents/pi_123/capture", "capture:o1"},
			{"/v1/payment_intents/pi_123/cancel", "cancel:o1"},
			{"/v1/refunds", "refund:o1"},
		} {
			require.Equal(t, http.MethodPost, reqs[i].method)
			require.Equal(t, want.path, reqs[i].path)
			require.Equal(t, want.key, reqs[i].header.Get("Idempotency-Key"))
			requireAuthorized(t, reqs[i])
		}
		require.Equal(t, url.Values{"payment_intent": {"pi_123"}}, reqs[2].form)
	})

	t.Run("GetAndListRead", func(t *testing.T) {
		t.Parallel()
		s, rec := setup(t)
		ctx := t.Context()

		in, err := s.Get(ctx, "pi_abc")
		require.NoError(t, err)
		require.Equal(t, "pi_abc", in.ID)

		from := time.Unix(1_700_000_000, 500_000_000)
		to := time.Unix(1_700_003_600, 0)
		list, err := s.List(ctx, from, to)
		require.NoError(t, err)
		require.NotEmpty(t, list)

		reqs := rec.requests()
		require.Len(t, reqs, 2)
		require.Equal(t, http.MethodGet, reqs[0].method)
		require.Equal(t, "/v1/payment_intents/pi_abc", reqs[0].path)
		require.Empty(t, reqs[0].header.Get("Idempotency-Key"), "reads carry no key")
		require.Equal(t, "/v1/payment_intents", reqs[1].path)
		require.Equal(t, "1700000000", reqs[1].query.Get("created[gte]"))
		require.Equal(t, "1700003600", reqs[1].query.Get("created[lt]"))
		require.Equal(t, "100", reqs[1].query.Get("limit"))
	})

	t.Run("InvalidRequestIsPermanent", func(t *testing.T) {
		t.Parallel()
		// stripe-mock validates requests against Stripe's OpenAPI spec and
		// answers an unknown parameter with a 400.
		rec := &recorder{mutate: func(f url.Values) { f.Set("not_a_stripe_param", "1") }}
		s := newStripe(t, base, rec, 2)
		_, err := s.Capture(t.Context(), "pi_123", "capture:o2")
		pe := requireCode(t, err, payments.CodeInvalidRequest, false)
		require.Equal(t, http.StatusBadRequest, pe.HTTPStatus)
		require.Equal(t, "capture", pe.Op)
		require.Equal(t, "pi_123", pe.IntentID)
		require.NotEmpty(t, pe.Message)
		require.Len(t, rec.requests(), 1, "a 400 is not retried")
	})

	t.Run("NetworkErrorIsRetriedWithTheSameKeyThenRetryable", func(t *testing.T) {
		t.Parallel()
		down := errors.New("connection refused")
		rec := &recorder{next: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, down })}
		s := newStripe(t, base, rec, 2)
		_, err := s.Capture(t.Context(), "pi_123", "capture:o3")
		pe := requireCode(t, err, payments.CodeNetwork, true)
		require.ErrorIs(t, err, down)
		require.Zero(t, pe.HTTPStatus)

		reqs := rec.requests()
		require.Len(t, reqs, 3, "stripe-go tried once and retried twice")
		for _, r := range reqs {
			require.Equal(t, "capture:o3", r.header.Get("Idempotency-Key"))
		}
	})

	t.Run("CanceledContextIsRetryable", func(t *testing.T) {
		t.Parallel()
		s, rec := setup(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := s.Refund(ctx, "pi_123", 0, "refund:o4")
		requireCode(t, err, payments.CodeNetwork, true)
		require.ErrorIs(t, err, context.Canceled)
		require.LessOrEqual(t, len(rec.requests()), 1, "a canceled call is not retried")
	})

	t.Run("InvalidParamsAreRefusedWithoutARequest", func(t *testing.T) {
		t.Parallel()
		s, rec := setup(t)
		ctx := t.Context()
		_, err := s.CreateIntent(ctx, payments.CreateIntentParams{OrderID: uuid.New(), AmountMinor: 100, Currency: "usd"})
		requireCode(t, err, payments.CodeInvalidRequest, false)
		_, err = s.Capture(ctx, "", "capture:x")
		requireCode(t, err, payments.CodeInvalidRequest, false)
		_, err = s.Refund(ctx, "pi_1", 0, "")
		requireCode(t, err, payments.CodeInvalidRequest, false)
		require.Empty(t, rec.requests())
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestStripeErrorClasses feeds stripe-go Stripe's error responses and
// checks how each is classified, and that no client secret leaks into the
// error.
func TestStripeErrorClasses(t *testing.T) {
	t.Parallel()
	const secret = "pi_leak_secret_DO_NOT_LOG"
	for _, tc := range []struct {
		name        string
		status      int
		header      http.Header
		body        string
		code        string
		retryable   bool
		declineCode string
	}{
		{name: "CardDeclined", status: 402, body: `{"error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds","message":"Your card has insufficient funds."}}`, code: payments.CodeCardDeclined, declineCode: "insufficient_funds"},
		{name: "UnexpectedStateCarryingTheIntent", status: 400, body: `{"error":{"type":"invalid_request_error","code":"payment_intent_unexpected_state","message":"This PaymentIntent could not be captured because it has a status of canceled.","payment_intent":{"id":"pi_leak","object":"payment_intent","client_secret":"` + secret + `","status":"canceled"}}}`, code: payments.CodeUnexpectedState},
		{name: "AlreadyRefunded", status: 400, body: `{"error":{"type":"invalid_request_error","code":"charge_already_refunded","message":"Charge ch_1 has already been refunded."}}`, code: payments.CodeChargeAlreadyRefunded},
		{name: "KeyReusedWithOtherParams", status: 400, body: `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters they were first used with."}}`, code: payments.CodeIdempotencyMismatch},
		{name: "NoSuchIntent", status: 404, body: `{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such payment_intent: 'pi_x'"}}`, code: payments.CodeResourceMissing},
		{name: "KeyQuotedInMessage", status: 401, body: `{"error":{"type":"invalid_request_error","message":"Authorization was 'Bearer ` + testSecretKey + `'."}}`, code: payments.CodeAuthentication},
		{name: "BadKey", status: 401, body: `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided: sk_test_****_123"}}`, code: payments.CodeAuthentication},
		{name: "KeyInUse", status: 409, body: `{"error":{"type":"idempotency_error","code":"idempotency_key_in_use","message":"There is currently another in-progress request using this Idempotent Key."}}`, code: payments.CodeIdempotencyKeyInUse, retryable: true},
		{name: "LockTimeout", status: 429, body: `{"error":{"type":"invalid_request_error","code":"lock_timeout","message":"This object cannot be accessed right now because another API request or Stripe process is currently accessing it."}}`, code: payments.CodeLockTimeout, retryable: true},
		{name: "RateLimited", status: 429, body: `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests."}}`, code: payments.CodeRateLimit, retryable: true},
		{name: "ServerError", status: 500, body: `{"error":{"type":"api_error","message":"Something went wrong on Stripe's end."}}`, code: payments.CodeAPIError, retryable: true},
		{name: "ServerSaysDoNotRetry", status: 500, header: http.Header{"Stripe-Should-Retry": {"false"}}, body: `{"error":{"type":"api_error","message":"Stored result."}}`, code: payments.CodeAPIError},
		{name: "BadGatewayHTML", status: 502, body: `<html>bad gateway</html>`, code: payments.CodeAPIError, retryable: true},
		{name: "UnreadableSuccess", status: 200, body: `{"id":"pi_x","client_secret":"` + secret + `",`, code: payments.CodeAPIError, retryable: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			rt := roundTripFunc(func(req *http.Request) (*http.Response, error) {
				calls++
				h := http.Header{"Content-Type": {"application/json"}, "Request-Id": {"req_test"}}
				for k, v := range tc.header {
					h[k] = v
				}
				return &http.Response{StatusCode: tc.status, Header: h, Body: io.NopCloser(strings.NewReader(tc.body)), Request: req}, nil
			})
			s := newStripe(t, "https://api.stripe.test", rt, -1)
			_, err := s.Capture(t.Context(), "pi_x", "capture:o")
			pe := requireCode(t, err, tc.code, tc.retryable)
			require.Equal(t, 1, calls, "retries disabled")
			require.Equal(t, tc.declineCode, pe.DeclineCode)
			if tc.status != 200 && tc.status != 502 {
				require.Equal(t, tc.status, pe.HTTPStatus)
				require.Equal(t, "req_test", pe.RequestID)
				require.NotEmpty(t, pe.Message)
			}
			for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", pe)} {
				require.NotContains(t, text, "_secret_")
				require.NotContains(t, text, testSecretKey)
			}
		})
	}
}

func TestStripeConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, payments.StripeConfig{SecretKey: "sk_test_1"}.Validate())
	err := payments.StripeConfig{}.Validate()
	require.ErrorContains(t, err, "STRIPE_SECRET_KEY")
	err = payments.StripeConfig{SecretKey: "sk_test_1", APIBase: "localhost:12111"}.Validate()
	require.ErrorContains(t, err, "STRIPE_API_BASE")
	require.NotContains(t, payments.StripeConfig{SecretKey: "sk_live_secret", APIBase: "::"}.Validate().Error(), "sk_live_secret")
}

// TestStripeHTTPClientKeepsConnectionsForConcurrentCalls: rounds of 16
// concurrent calls over HTTP/1.1 through NewStripe's default client open
// at most one connection per call at once, then reuse them. With
// http.DefaultTransport (two idle connections per host) every later round
// dialed 14 connections anew.
func TestStripeHTTPClientKeepsConnectionsForConcurrentCalls(t *testing.T) {
	t.Parallel()
	const concurrent, rounds = 16, 5
	var conns atomic.Int64
	var inFlight sync.WaitGroup
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every call of a round is in flight before any answers, so the
		// round needs 16 connections at once.
		inFlight.Done()
		inFlight.Wait()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"pi_x","object":"payment_intent","status":"requires_capture","amount":100,"currency":"eur"}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	s, err := payments.NewStripe(payments.StripeConfig{SecretKey: testSecretKey, APIBase: srv.URL, MaxNetworkRetries: -1})
	require.NoError(t, err)
	for range rounds {
		inFlight.Add(concurrent)
		var g errgroup.Group
		for i := range concurrent {
			g.Go(func() error {
				_, err := s.Capture(t.Context(), "pi_x", fmt.Sprintf("capture:%d", i))
				return err
			})
		}
		require.NoError(t, g.Wait())
	}
	require.LessOrEqual(t, conns.Load(), int64(concurrent), "connections opened for %d rounds of %d concurrent calls", rounds, concurrent)
}
