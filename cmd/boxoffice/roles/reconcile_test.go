package roles

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"boxoffice/testkit/dbtest"
)

func TestReconcileCommand(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DATABASE_URL": dbtest.NewURL(t), "BOXOFFICE_PAYMENTS": "sandbox",
		"STRIPE_WEBHOOK_SECRET": testSecrets(t)["STRIPE_WEBHOOK_SECRET"], "BOXOFFICE_LOG_LEVEL": "error",
	}
	getenv := func(k string) string { return env[k] }
	var out bytes.Buffer
	require.NoError(t, runReconcile(context.Background(), []string{"-since", "1h", "-dry-run"}, getenv, &out))
	require.Contains(t, out.String(), "(dry run: nothing written)")
	require.Contains(t, out.String(), "0 intents at the provider, 0 mismatches")
	require.ErrorContains(t, runReconcile(context.Background(), []string{"-from", "2027-01-02T00:00:00Z", "-to", "2027-01-01T00:00:00Z"}, getenv, &out),
		"the window is empty")
}
