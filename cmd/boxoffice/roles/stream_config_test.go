package roles

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BOXOFFICE_STREAM_MAX_AGE is the TICKETING stream's replay horizon:
// a week unless set, and never under an hour.
func TestConfigStreamMaxAge(t *testing.T) {
	t.Parallel()
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "BOXOFFICE_STREAM_MAX_AGE" {
				return v
			}
			return ""
		}
	}
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{{"", 168 * time.Hour}, {"48h", 48 * time.Hour}, {"1h", time.Hour}, {"720h", 720 * time.Hour}} {
		cfg, err := LoadConfig(env(tc.value))
		require.NoError(t, err, tc.value)
		require.Equal(t, tc.want, cfg.Streams.MaxAge, tc.value)
	}
	for _, value := range []string{"30m", "0", "-1h", "a week"} {
		_, err := LoadConfig(env(value))
		require.Error(t, err, value)
		require.True(t, strings.HasPrefix(err.Error(), "BOXOFFICE_STREAM_MAX_AGE: "), err.Error())
	}
}
