package roles

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/admission"
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

// No role but dev (and the token minter, which serves nothing) accepts a
// secret this repository publishes, in whatever variable it is given,
// and the error names the variable.
func TestRolesRefusePublicSecrets(t *testing.T) {
	t.Parallel()
	secrets := testSecrets(t)
	_, err := LoadConfig(envOf(secrets))
	require.NoError(t, err, "secrets of one's own are accepted")
	b64 := base64.StdEncoding.EncodeToString
	devSigningSeed := admission.DeriveSigningKey([]byte(DevAdmissionKey)).Seed()
	_, devWebhookKey, _ := strings.Cut(DevWebhookSecretKeys, ":")
	cases := []struct{ name, value string }{
		{"BOXOFFICE_JWT_SECRET", DevJWTSecret},
		{"BOXOFFICE_JWT_SECRET", composeJWTSecret},
		{"BOXOFFICE_JWT_SECRET", DevAdmissionKey}, // public in any variable
		{"BOXOFFICE_ADMISSION_KEY", DevAdmissionKey},
		{"BOXOFFICE_ADMISSION_KEY", composeAdmissionKey},
		// The key dev derives from its admission key.
		{"BOXOFFICE_ADMISSION_SIGNING_KEY", b64(devSigningSeed)},
		{"BOXOFFICE_ADMISSION_SIGNING_KEY", b64(DevTicketSeed())},
		{"STRIPE_WEBHOOK_SECRET", DevWebhookKey},
		{"STRIPE_WEBHOOK_SECRET", composeWebhookKey},
		{"STRIPE_WEBHOOK_SECRET", envExamplePlaceholder},
		{"BOXOFFICE_TICKET_SIGNING_KEY", b64(DevTicketSeed())},
		{"BOXOFFICE_TICKET_SIGNING_KEY", composeTicketSeed},
		{webhookKeysVar, DevWebhookSecretKeys},
		// A list that contains the dev key, first or not, under any id.
		{webhookKeysVar, secrets[webhookKeysVar] + "," + DevWebhookSecretKeys},
		{webhookKeysVar, "mine:" + devWebhookKey},
		{webhookKeysVar, secrets[webhookKeysVar] + "," + composeWebhookSecretKeys},
	}
	for _, tc := range cases {
		env := withVars(secrets, map[string]string{tc.name: tc.value})
		_, err := LoadConfig(envOf(env))
		require.Error(t, err, "%s = public value", tc.name)
		require.True(t, strings.HasPrefix(err.Error(), tc.name+": "), err.Error())
		require.Contains(t, err.Error(), "public development value")
		require.NotContains(t, err.Error(), tc.value, "the error never repeats the value")

		_, err = LoadDevConfig(envOf(env))
		require.NoError(t, err, "dev's loader accepts %s", tc.name)
	}
	// The same key written as PEM (openssl genpkey's form) is as public.
	der, err := x509.MarshalPKCS8PrivateKey(ed25519.NewKeyFromSeed(devSigningSeed))
	require.NoError(t, err)
	devPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	_, err = LoadConfig(envOf(withVars(secrets, map[string]string{"BOXOFFICE_ADMISSION_SIGNING_KEY": devPEM})))
	require.ErrorContains(t, err, "BOXOFFICE_ADMISSION_SIGNING_KEY: is a public development value")

	// serve, relay and work refuse before they open anything.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	env := withVars(secrets, map[string]string{
		"DATABASE_URL": "postgres://127.0.0.1:1/none", "NATS_URL": "nats://127.0.0.1:1", "BOXOFFICE_PAYMENTS": "sandbox",
		"BOXOFFICE_JWT_SECRET": DevJWTSecret, "BOXOFFICE_LOG_LEVEL": "error",
	})
	for name, run := range map[string]func(context.Context, []string, func(string) string) error{
		"serve": runServe, "relay": runRelay, "work": runWork,
	} {
		err := run(ctx, nil, envOf(env))
		require.Error(t, err, name)
		require.True(t, strings.HasPrefix(err.Error(), "BOXOFFICE_JWT_SECRET: is a public development value"), "%s: %v", name, err)
	}
}

// A secret variable may be read from the file <VAR>_FILE names, as
// Docker and Kubernetes mount secrets; one trailing newline is not part
// of it. Both set, or a file that cannot be read, stops start-up.
func TestSecretsFromFiles(t *testing.T) {
	t.Parallel()
	secrets := testSecrets(t)
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
		return path
	}
	env := map[string]string{
		"BOXOFFICE_JWT_SECRET_FILE":          file("jwt", secrets["BOXOFFICE_JWT_SECRET"]+"\n"),
		"BOXOFFICE_TICKET_SIGNING_KEY_FILE":  file("ticket", secrets["BOXOFFICE_TICKET_SIGNING_KEY"]+"\r\n"),
		webhookKeysVar + "_FILE":             file("keys", secrets[webhookKeysVar]),
		"STRIPE_WEBHOOK_SECRET_FILE":         file("whsec", secrets["STRIPE_WEBHOOK_SECRET"]+"\n"),
		"DATABASE_URL_FILE":                  file("db", "postgres://u:p@db:5432/boxoffice\n"),
		"BOXOFFICE_CELLS":                    "a",
		"BOXOFFICE_CELL_A_DATABASE_URL_FILE": file("cell-a", "postgres://u:p@cell-a:5432/boxoffice\n"),
	}
	cfg, err := LoadConfig(envOf(env), "DATABASE_URL", "BOXOFFICE_JWT_SECRET", "STRIPE_WEBHOOK_SECRET")
	require.NoError(t, err)
	require.Equal(t, secrets["BOXOFFICE_JWT_SECRET"], string(cfg.JWTSecret))
	require.Equal(t, secrets["STRIPE_WEBHOOK_SECRET"], cfg.StripeWebhookSecret)
	require.Equal(t, "postgres://u:p@db:5432/boxoffice", cfg.DatabaseURL)
	require.Equal(t, []cellConfig{{Name: "a", DatabaseURL: "postgres://u:p@cell-a:5432/boxoffice"}}, cfg.Cells)
	require.NotNil(t, cfg.TicketSeed)
	require.NotNil(t, cfg.Webhooks.SecretKeys)

	_, err = LoadConfig(envOf(withVars(env, map[string]string{"BOXOFFICE_JWT_SECRET": secrets["BOXOFFICE_JWT_SECRET"]})))
	require.ErrorContains(t, err, "BOXOFFICE_JWT_SECRET: and BOXOFFICE_JWT_SECRET_FILE are both set")
	_, err = LoadConfig(envOf(withVars(env, map[string]string{"STRIPE_WEBHOOK_SECRET_FILE": filepath.Join(dir, "missing")})))
	require.ErrorContains(t, err, "STRIPE_WEBHOOK_SECRET_FILE: cannot be read")

	// A public secret is refused from a file as from the environment.
	_, err = LoadConfig(envOf(withVars(env, map[string]string{"BOXOFFICE_JWT_SECRET_FILE": file("dev-jwt", DevJWTSecret+"\n")})))
	require.ErrorContains(t, err, "BOXOFFICE_JWT_SECRET: is a public development value")
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

// dev keeps its defaults: the public secrets (which only its loader
// accepts) and the sandbox, named by dev itself; a Stripe key makes it
// stripe, and a secret given as a file replaces the default.
func TestDevDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := LoadDevConfig(devEnv(envOf(nil)))
	require.NoError(t, err)
	require.Equal(t, "sandbox", cfg.Payments)
	require.Equal(t, DevJWTSecret, string(cfg.JWTSecret))
	_, err = LoadConfig(devEnv(envOf(nil)))
	require.ErrorContains(t, err, "public development value", "no loader but dev's takes dev's secrets")

	cfg, err = LoadDevConfig(devEnv(envOf(map[string]string{"STRIPE_SECRET_KEY": "sk_test_x"})))
	require.NoError(t, err)
	require.Equal(t, "stripe", cfg.Payments)

	secret := randomHex(t, 32)
	path := filepath.Join(t.TempDir(), "jwt")
	require.NoError(t, os.WriteFile(path, []byte(secret+"\n"), 0o600))
	cfg, err = LoadDevConfig(devEnv(envOf(map[string]string{"BOXOFFICE_JWT_SECRET_FILE": path})))
	require.NoError(t, err)
	require.Equal(t, secret, string(cfg.JWTSecret))
}

// BOXOFFICE_CELL_<NAME>_ORGANIZERS dedicates a cell to organizers: ids are
// UUIDs, one organizer is dedicated to one cell, and one cell at least
// stays shared for every other organizer.
func TestDedicatedCells(t *testing.T) {
	t.Parallel()
	star, star2 := uuid.New(), uuid.New()
	env := withVars(testSecrets(t), map[string]string{
		"BOXOFFICE_CELLS":                     "a,stadium",
		"BOXOFFICE_CELL_A_DATABASE_URL":       "postgres://u:p@cell-a:5432/boxoffice",
		"BOXOFFICE_CELL_STADIUM_DATABASE_URL": "postgres://u:p@cell-s:5432/boxoffice",
		"BOXOFFICE_CELL_STADIUM_ORGANIZERS":   " " + star.String() + ", " + star2.String(),
	})
	cfg, err := LoadConfig(envOf(env))
	require.NoError(t, err)
	require.Equal(t, []cellConfig{
		{Name: "a", DatabaseURL: "postgres://u:p@cell-a:5432/boxoffice"},
		{Name: "stadium", DatabaseURL: "postgres://u:p@cell-s:5432/boxoffice", Organizers: []uuid.UUID{star, star2}},
	}, cfg.Cells)

	_, err = LoadConfig(envOf(withVars(env, map[string]string{"BOXOFFICE_CELL_STADIUM_ORGANIZERS": "acme"})))
	require.ErrorContains(t, err, `BOXOFFICE_CELL_STADIUM_ORGANIZERS: "acme" is not an organizer id`)
	_, err = LoadConfig(envOf(withVars(env, map[string]string{"BOXOFFICE_CELL_A_ORGANIZERS": star.String()})))
	require.ErrorContains(t, err, "is dedicated to cell")
	_, err = LoadConfig(envOf(withVars(env, map[string]string{"BOXOFFICE_CELL_A_ORGANIZERS": uuid.NewString()})))
	require.ErrorContains(t, err, "at least one must take the others")
}
