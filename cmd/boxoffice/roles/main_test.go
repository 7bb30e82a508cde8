package roles

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// `boxoffice dev` migrates, seeds the demo event and prints tokens that
// work: a buyer can hold a seat of the demo event with them. A second start
// on the same database reuses the demo event.
func TestDevServesTheDemoEvent(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	env := func(name string) string {
		return map[string]string{"DATABASE_URL": url, "HTTP_ADDR": "127.0.0.1:0", "OPS_ADDR": "127.0.0.1:0", "BOXOFFICE_LOG_LEVEL": "warn"}[name]
	}
	var metricsURL string
	run := func() (api, natsURL, event, buyer string) {
		out := startDev(t, env)
		re := regexp.MustCompile(`(?s)API\s+(\S+).*Metrics\s+(\S+).*NATS\s+(\S+).*Demo event\s+(\S+).*Buyer token\s+(\S+)`)
		require.Eventually(t, func() bool { return re.MatchString(out.String()) }, 60*time.Second, 50*time.Millisecond, "dev printed: %s", out)
		m := re.FindStringSubmatch(out.String())
		metricsURL = m[2]
		return m[1], m[3], m[4], m[5]
	}

	api, natsURL, event, buyer := run()
	do := func(method, path string, headers map[string]string, body string, out any) int {
		req, err := http.NewRequest(method, api+path, strings.NewReader(body))
		require.NoError(t, err)
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		if out != nil {
			require.NoError(t, json.NewDecoder(res.Body).Decode(out))
		}
		return res.StatusCode
	}
	var seats struct{ Seats []struct{ ID string } }
	require.Equal(t, http.StatusOK, do(http.MethodGet, "/v1/events/"+event+"/seats", nil, "", &seats))
	require.Len(t, seats.Seats, 3800)
	var adm struct{ AdmissionToken string }
	require.Equal(t, http.StatusOK, do(http.MethodPost, "/v1/events/"+event+"/waiting-room", map[string]string{"Authorization": "Bearer " + buyer}, "", &adm))
	var held struct{ OrderID string }
	require.Equal(t, http.StatusAccepted, do(http.MethodPost, "/v1/events/"+event+"/holds", map[string]string{
		"Authorization": "Bearer " + buyer, "X-Admission-Token": adm.AdmissionToken,
		"Idempotency-Key": "dev-test", "Content-Type": "application/json",
	}, `{"seatIds":["`+seats.Seats[0].ID+`","`+seats.Seats[1].ID+`"]}`, &held))

	// A full purchase through the sandbox, every process of the product
	// running inside dev: the saga asks for a PaymentIntent, the buyer
	// confirms the card, the sandbox's signed webhook comes back through
	// our own ingress, the order is confirmed, captured and ticketed.
	type order struct {
		Status              string
		Payment             *struct{ PaymentIntentID, ClientSecret string }
		Tickets             []struct{ ID, SeatID string }
		LastDecline         *struct{ Code, Message string }
		PaymentAttemptsLeft int
	}
	var o order
	bearer := map[string]string{"Authorization": "Bearer " + buyer}
	require.Eventually(t, func() bool {
		o = order{}
		return do(http.MethodGet, "/v1/orders/"+held.OrderID, bearer, "", &o) == http.StatusOK &&
			o.Payment != nil && o.Payment.PaymentIntentID != "" && o.Payment.ClientSecret != ""
	}, 30*time.Second, 20*time.Millisecond, "the order never got a PaymentIntent")
	require.Equal(t, "pending_payment", o.Status)
	// Two declined cards first: each is counted on the order, which keeps
	// awaiting payment with its seats held, on the same intent.
	for declined := 1; declined <= 2; declined++ {
		require.Equal(t, http.StatusOK, do(http.MethodPost, "/v1/sandbox/payment-intents/"+o.Payment.PaymentIntentID+"/decline", bearer, "", nil))
		require.Eventually(t, func() bool {
			o = order{}
			return do(http.MethodGet, "/v1/orders/"+held.OrderID, bearer, "", &o) == http.StatusOK && o.PaymentAttemptsLeft == 3-declined
		}, 30*time.Second, 20*time.Millisecond, "decline %d was not counted", declined)
		require.Equal(t, "pending_payment", o.Status)
		require.Equal(t, "generic_decline", o.LastDecline.Code)
		// The seat map is cached for a second: it shows the hold soon.
		require.Eventually(t, func() bool {
			var now struct{ Seats []struct{ ID, Status string } }
			return do(http.MethodGet, "/v1/events/"+event+"/seats", nil, "", &now) == http.StatusOK && now.Seats[0].Status == "held"
		}, 10*time.Second, 50*time.Millisecond, "the seats stay held between attempts")
	}
	require.Equal(t, http.StatusOK, do(http.MethodPost, "/v1/sandbox/payment-intents/"+o.Payment.PaymentIntentID+"/authorize", bearer, "", nil))
	start := time.Now()
	require.Eventually(t, func() bool {
		o = order{}
		return do(http.MethodGet, "/v1/orders/"+held.OrderID, bearer, "", &o) == http.StatusOK && o.Status == "ticketed"
	}, 30*time.Second, 20*time.Millisecond, "the order never got ticketed: last status %q", &o.Status)
	t.Logf("authorized → ticketed in %s", time.Since(start))
	require.Len(t, o.Tickets, 2)
	require.Empty(t, o.Payment.ClientSecret, "the client secret is shown only while payment is pending")

	// The relay running inside dev publishes the hold to the embedded
	// JetStream.
	nc, js, err := bus.Connect(natsURL, "dev-test", slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	defer nc.Close()
	require.Eventually(t, func() bool {
		info, err := js.Stream(context.Background(), bus.Stream)
		if err != nil {
			return false
		}
		st, err := info.Info(context.Background(), jetstream.WithSubjectFilter("ticketing.order.HoldCreated"))
		return err == nil && st.State.Subjects["ticketing.order.HoldCreated"] == 1
	}, 30*time.Second, 50*time.Millisecond)

	// /metrics is on the ops listener, not on the public API.
	res, err := http.Get(api + "/metrics")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	require.NotEqual(t, api+"/metrics", metricsURL)
	res, err = http.Get(metricsURL)
	require.NoError(t, err)
	metrics, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	for _, name := range []string{"boxoffice_http_request_duration_seconds", "boxoffice_relay_published_total",
		"boxoffice_outbox_backlog", "boxoffice_outbox_oldest_unpublished_age_seconds"} {
		require.Contains(t, string(metrics), name)
	}
	require.Contains(t, string(metrics), "\nboxoffice_payments_sandbox 1\n", "dev runs the sandbox, and says so")

	_, _, again, _ := run()
	require.Equal(t, event, again, "a second dev run seeds no second demo event")
}

// startDev runs `boxoffice dev` with env until the test ends, and returns
// what it prints.
func startDev(t *testing.T, env func(string) string) *testkit.Buffer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &testkit.Buffer{}
	done := make(chan error, 1)
	// The directory first: cleanups run last-registered first, so dev is
	// stopped before its directory is removed. (Made inside the goroutine,
	// its removal was registered after the stop and ran while dev still
	// wrote to it: "directory not empty".)
	dir := t.TempDir()
	go func() { done <- runDev(ctx, []string{"-dir", dir}, env, out) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return out
}

func TestConfigNamesTheVariable(t *testing.T) {
	t.Parallel()
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	cases := []struct {
		vars     map[string]string
		required []string
		name     string
	}{
		{map[string]string{}, []string{"DATABASE_URL"}, "DATABASE_URL"},
		{map[string]string{"BOXOFFICE_JWT_SECRET": "short"}, nil, "BOXOFFICE_JWT_SECRET"},
		{map[string]string{"BOXOFFICE_HOLD_TTL": "five minutes"}, nil, "BOXOFFICE_HOLD_TTL"},
		{map[string]string{"BOXOFFICE_HOLD_TTL": "-1m"}, nil, "BOXOFFICE_HOLD_TTL"},
		{map[string]string{"BOXOFFICE_ADMISSION_TTL": "10s"}, nil, "BOXOFFICE_ADMISSION_TTL"},
		{map[string]string{"BOXOFFICE_CORS_ORIGINS": "*"}, nil, "BOXOFFICE_CORS_ORIGINS"},
		{map[string]string{"BOXOFFICE_CORS_ORIGINS": "https://shop.example.com/app"}, nil, "BOXOFFICE_CORS_ORIGINS"},
		{map[string]string{"BOXOFFICE_ADMISSION_TTL": "forever"}, nil, "BOXOFFICE_ADMISSION_TTL"},
		{map[string]string{"DATABASE_MAX_CONNS": "0"}, nil, "DATABASE_MAX_CONNS"},
		{map[string]string{"BOXOFFICE_LOG_LEVEL": "loud"}, nil, "BOXOFFICE_LOG_LEVEL"},
		{map[string]string{"DATABASE_STATEMENT_TIMEOUT": "soon"}, nil, "DATABASE_STATEMENT_TIMEOUT"},
		{map[string]string{"DATABASE_LOCK_TIMEOUT": "-1s"}, nil, "DATABASE_LOCK_TIMEOUT"},
		{map[string]string{"BOXOFFICE_PAYMENT_GRACE": "1h"}, nil, "BOXOFFICE_PAYMENT_GRACE"},
		{map[string]string{"BOXOFFICE_INBOX_RETENTION": "168h"}, nil, "BOXOFFICE_INBOX_RETENTION"},
		{map[string]string{"BOXOFFICE_STRIPE_EVENT_RETENTION": "1h"}, nil, "BOXOFFICE_STRIPE_EVENT_RETENTION"},
		{map[string]string{"BOXOFFICE_JWKS_URL": "https://idp.example.com/jwks"}, nil, "BOXOFFICE_JWT_ISSUER"},
		{map[string]string{"BOXOFFICE_JWKS_URL": "https://idp.example.com/jwks", "BOXOFFICE_JWT_ISSUER": "https://idp.example.com/"}, nil, "BOXOFFICE_JWT_AUDIENCE"},
		{map[string]string{"BOXOFFICE_JWKS_URL": "idp.example.com/jwks"}, nil, "BOXOFFICE_JWKS_URL"},
		{map[string]string{"BOXOFFICE_JWKS_URL": "http://idp.example.com/jwks", "BOXOFFICE_JWT_ISSUER": "i", "BOXOFFICE_JWT_AUDIENCE": "a"}, nil, "BOXOFFICE_JWKS_URL"},
		{map[string]string{"BOXOFFICE_ADMISSION_SIGNING_KEY": "not-a-key"}, nil, "BOXOFFICE_ADMISSION_SIGNING_KEY"},
	}
	for _, tc := range cases {
		_, err := LoadConfig(env(tc.vars), tc.required...)
		require.Error(t, err)
		require.True(t, strings.HasPrefix(err.Error(), tc.name+": "), err.Error())
	}
	for _, u := range []string{"https://idp.example.com/jwks", "http://127.0.0.1:9000/jwks", "http://localhost/jwks", "http://[::1]/jwks"} {
		_, err := LoadConfig(env(map[string]string{"BOXOFFICE_JWKS_URL": u, "BOXOFFICE_JWT_ISSUER": "i", "BOXOFFICE_JWT_AUDIENCE": "a"}))
		require.NoError(t, err, "%s: https, or http to a loopback address", u)
	}
	cfg, err := LoadConfig(env(map[string]string{}))
	require.NoError(t, err)
	require.Equal(t, 5*time.Minute, cfg.HoldTTL)
	require.Equal(t, 15*time.Minute, cfg.AdmissionTTL)
	require.Empty(t, cfg.CORSOrigins, "no CORS unless asked")
	cfg, err = LoadConfig(env(map[string]string{"BOXOFFICE_ADMISSION_KEY": "admission-key-0123456789abcdef-0123456789", "BOXOFFICE_ADMISSION_TTL": "40m"}))
	require.NoError(t, err)
	require.Equal(t, 40*time.Minute, cfg.admissionSigner().TTL(), "the setting reaches the tokens")
	require.Equal(t, 30*time.Second, cfg.DBStatementTimeout)
	require.Equal(t, 10*time.Second, cfg.DBLockTimeout)
	require.Equal(t, 5*time.Minute, cfg.PaymentGrace)
	require.Equal(t, ":8080", cfg.HTTPAddr)
}
