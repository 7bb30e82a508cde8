package verified

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCache(t *testing.T) {
	t.Parallel()
	c := New[int]()
	now := time.Now()
	c.Put("a", 1, now.Add(time.Minute))
	v, ok := c.Get("a", now)
	require.True(t, ok)
	require.Equal(t, 1, v)
	_, ok = c.Get("a", now.Add(time.Minute))
	require.False(t, ok, "not at or after its expiry")
	_, ok = c.Get("b", now)
	require.False(t, ok)
	c.Put("c", 3, time.Time{})
	_, ok = c.Get("c", now)
	require.False(t, ok, "a token without expiry is not remembered")

	for i := range Max {
		c.Put(strconv.Itoa(i), i, now.Add(time.Minute))
	}
	require.LessOrEqual(t, c.Len(), Max, "bounded")
}
