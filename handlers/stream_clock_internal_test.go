package handlers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestStreamClock(t *testing.T) {
	t.Parallel()

	t.Run("SignalsEachStreamOncePerPeriod", func(t *testing.T) {
		t.Parallel()
		const tick, slots = 10 * time.Millisecond, 5
		c := newStreamClock(tick, slots)
		a, removeA := c.add()
		defer removeA()
		b, removeB := c.add()
		defer removeB()
		start := time.Now()
		for _, beat := range []*streamBeat{a, b} {
			select {
			case <-beat.C:
			case <-time.After(time.Second):
				t.Fatal("no heartbeat within a second")
			}
			// Its slot comes round once every slots ticks: not at the
			// first tick after registering.
			require.GreaterOrEqual(t, time.Since(start), (slots-2)*tick)
		}
		// The next one, a period later.
		start = time.Now()
		<-a.C
		require.GreaterOrEqual(t, time.Since(start), (slots-1)*tick)
	})

	t.Run("StopsWhenNoStreamIsLeft", func(t *testing.T) {
		t.Parallel()
		c := newStreamClock(time.Millisecond, 2)
		_, remove := c.add()
		require.True(t, c.isRunning())
		remove()
		require.Eventually(t, func() bool { return !c.isRunning() }, time.Second, time.Millisecond, "the clock's goroutine ends")
		beat, remove := c.add()
		defer remove()
		require.True(t, c.isRunning(), "and starts again with the next stream")
		select {
		case <-beat.C:
		case <-time.After(time.Second):
			t.Fatal("no heartbeat within a second")
		}
	})
}
