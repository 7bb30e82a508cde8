package roles

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"boxoffice/testkit/dbtest"
)

func TestFenceCommandRaisesNeverLowers(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": dbtest.NewURL(t)}
	getenv := func(k string) string { return env[k] }
	fence := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := runFence(context.Background(), args, getenv, &out)
		return out.String(), err
	}
	out, err := fence("-epoch", "2")
	require.NoError(t, err)
	require.Contains(t, out, "raised from 1 to 2")
	out, err = fence("-epoch", "2")
	require.NoError(t, err, "raising to the epoch in force is a no-op")
	require.Contains(t, out, "already 2")
	_, err = fence("-epoch", "1")
	require.ErrorContains(t, err, "never lowered")
	_, err = fence()
	require.ErrorContains(t, err, "--epoch N is required")
}
