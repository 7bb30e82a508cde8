package handlers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestKeyedLimiter(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_700_000_000, 0)

	t.Run("RefusesBeyondTheBurstAndSaysWhenToRetry", func(t *testing.T) {
		t.Parallel()
		l := newKeyedLimiter[string](2, 3)
		for range 3 {
			_, ok := l.allow("a", t0)
			require.True(t, ok)
		}
		wait, ok := l.allow("a", t0)
		require.False(t, ok)
		require.Equal(t, 500*time.Millisecond, wait)
		_, ok = l.allow("b", t0)
		require.True(t, ok, "another key has its own bucket")
		_, ok = l.allow("a", t0.Add(500*time.Millisecond))
		require.True(t, ok, "a refused request took no token")
	})

	t.Run("ForgetsIdleKeys", func(t *testing.T) {
		t.Parallel()
		l := newKeyedLimiter[int](5, 10) // refills in 2s
		for k := range 1000 {
			l.allow(k, t0)
		}
		require.Equal(t, 1000, l.size())
		l.allow(-1, t0.Add(2*time.Second))
		require.Equal(t, 1, l.size(), "buckets full again are forgotten")
	})

	t.Run("BoundedWhateverTheKeys", func(t *testing.T) {
		t.Parallel()
		l := newKeyedLimiter[int](5, 10)
		for k := range limiterMaxKeys + 10 {
			l.allow(k, t0)
			require.LessOrEqual(t, l.size(), limiterMaxKeys)
		}
	})

	t.Run("NilAllowsEverything", func(t *testing.T) {
		t.Parallel()
		var l *keyedLimiter[string]
		_, ok := l.allow("a", t0)
		require.True(t, ok)
	})
}

func TestClientAddress(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"192.0.2.7:5123":             "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:443": "2001:db8:1:2::/64",
		"[::ffff:192.0.2.7]:80":      "192.0.2.7",
		"not-an-address":             "not-an-address",
	} {
		require.Equal(t, want, clientAddress(in), in)
	}
}
