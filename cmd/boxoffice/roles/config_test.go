package roles

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"io"
	"log/slog"
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/testkit"
)

// testSecrets returns a value of every secret variable, random for this
// test and of the shape each one needs: what a role that is not dev must
// be given instead of the public development values.
func testSecrets(t *testing.T) map[string]string {
	t.Helper()
	return map[string]string{
		"BOXOFFICE_JWT_SECRET":            randomHex(t, 32),
		"BOXOFFICE_ADMISSION_KEY":         randomHex(t, 32),
		"BOXOFFICE_ADMISSION_SIGNING_KEY": base64.StdEncoding.EncodeToString(randomBytes(t, 32)),
		"STRIPE_WEBHOOK_SECRET":           "whsec_" + randomHex(t, 24),
		"BOXOFFICE_TICKET_SIGNING_KEY":    base64.StdEncoding.EncodeToString(randomBytes(t, 32)),
		webhookKeysVar:                    "test:" + base64.StdEncoding.EncodeToString(randomBytes(t, 32)),
	}
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

// randomHex is n random bytes in hex (2n characters).
func randomHex(t *testing.T, n int) string {
	t.Helper()
	return hex.EncodeToString(randomBytes(t, n))
}

// envOf returns a getenv that reads vars.
func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// withVars returns a copy of base with vars set (an empty value unsets).
func withVars(base map[string]string, vars map[string]string) map[string]string {
	out := maps.Clone(base)
	for k, v := range vars {
		if v == "" {
			delete(out, k)
			continue
		}
		out[k] = v
	}
	return out
}

// The sandbox lets buyers authorize their own payments, so it runs only
// when BOXOFFICE_PAYMENTS names it: unset, payments go to Stripe, and a
// role that moves money does not start without STRIPE_SECRET_KEY, saying
// how to ask for the sandbox instead.
func TestPaymentsAreStripeUnlessTheSandboxIsNamed(t *testing.T) {
	t.Parallel()
	secrets := testSecrets(t)

	cfg, err := LoadConfig(envOf(secrets))
	require.NoError(t, err)
	require.Equal(t, "stripe", cfg.Payments, "no provider named: Stripe, never the sandbox")
	err = cfg.paymentsNeeds()
	require.ErrorContains(t, err, "STRIPE_SECRET_KEY: ")
	require.ErrorContains(t, err, "BOXOFFICE_PAYMENTS=sandbox")

	cfg, err = LoadConfig(envOf(withVars(secrets, map[string]string{"STRIPE_SECRET_KEY": "sk_test_x"})))
	require.NoError(t, err)
	require.Equal(t, "stripe", cfg.Payments)
	require.NoError(t, cfg.paymentsNeeds())

	cfg, err = LoadConfig(envOf(withVars(secrets, map[string]string{"BOXOFFICE_PAYMENTS": "sandbox"})))
	require.NoError(t, err)
	require.Equal(t, "sandbox", cfg.Payments)
	require.NoError(t, cfg.paymentsNeeds())

	// Each role that moves money stops before it opens anything: the
	// context is already canceled, so any later step would fail otherwise.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	base := withVars(secrets, map[string]string{
		"DATABASE_URL": "postgres://127.0.0.1:1/none", "NATS_URL": "nats://127.0.0.1:1",
		"HTTP_ADDR": "127.0.0.1:0", "OPS_ADDR": "127.0.0.1:0", "BOXOFFICE_LOG_LEVEL": "error",
	})
	for name, run := range map[string]func(context.Context, []string, func(string) string) error{
		"serve": runServe, "work": runWork,
		"reconcile": func(ctx context.Context, args []string, getenv func(string) string) error {
			return runReconcile(ctx, args, getenv, io.Discard)
		},
	} {
		err := run(ctx, nil, envOf(base))
		require.Error(t, err, name)
		require.True(t, strings.HasPrefix(err.Error(), "STRIPE_SECRET_KEY: "), "%s: %v", name, err)
	}
}

// With the sandbox, a role says so three ways: a warning at start, the
// gauge boxoffice_payments_sandbox at 1 and /readyz's payments field;
// with Stripe, the gauge is 0 and nothing is logged.
func TestAnnouncePayments(t *testing.T) {
	t.Parallel()
	for _, provider := range []string{"sandbox", "stripe"} {
		t.Run(provider, func(t *testing.T) {
			t.Parallel()
			logs := testkit.NewLog(t)
			reg := prometheus.NewRegistry()
			announcePayments(context.Background(), Config{Payments: provider}, logs.Logger, reg)
			want := map[string]float64{"sandbox": 1, "stripe": 0}[provider]
			families, err := reg.Gather()
			require.NoError(t, err)
			require.Len(t, families, 1)
			require.Equal(t, paymentsSandboxMetric, families[0].GetName())
			require.Equal(t, want, families[0].GetMetric()[0].GetGauge().GetValue())
			var warned []testkit.Line
			for _, l := range logs.Lines(t) {
				if l["level"] == slog.LevelWarn.String() {
					warned = append(warned, l)
				}
			}
			if provider == "stripe" {
				require.Empty(t, warned)
				return
			}
			require.Len(t, warned, 1)
			require.Contains(t, warned[0]["msg"], "buyers authorize their own payments")
			require.Contains(t, warned[0]["msg"], "never production")
		})
	}
}
