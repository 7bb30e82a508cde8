package roles

import (
	"bytes"
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/testkit/dbtest"
)

// `boxoffice smoke` against every role running inside `boxoffice dev`: a
// synthetic hold, sandbox payment, ticket and test webhook go through, and
// it says so; against an API that does not answer it fails with the step.
func TestSmokePassesAgainstARunningDeployment(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	env := func(name string) string {
		return map[string]string{"DATABASE_URL": url, "HTTP_ADDR": "127.0.0.1:0", "OPS_ADDR": "127.0.0.1:0", "BOXOFFICE_LOG_LEVEL": "warn"}[name]
	}
	out := startDev(t, env)
	re := regexp.MustCompile(`API\s+(\S+)`)
	require.Eventually(t, func() bool { return re.MatchString(out.String()) }, 60*time.Second, 50*time.Millisecond, "dev printed: %s", out)
	api := re.FindStringSubmatch(out.String())[1]

	smokeEnv := func(name string) string {
		return map[string]string{"BOXOFFICE_JWT_SECRET": DevJWTSecret}[name]
	}
	var got bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, runSmoke(ctx, []string{"-api", api}, smokeEnv, &got), "smoke printed: %s", got.String())
	require.Contains(t, got.String(), "smoke passed")
	require.Contains(t, got.String(), "test webhook received")

	got.Reset()
	err := runSmoke(ctx, []string{"-api", "http://127.0.0.1:1", "-timeout", "2s"}, smokeEnv, &got)
	require.ErrorContains(t, err, "smoke: create event")
}
