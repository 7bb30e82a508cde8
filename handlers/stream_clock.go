package handlers

import (
	"sync"
	"time"
)

// streamClock is the heartbeat of every open order event stream of a
// process: one timer wheel instead of a ticker per stream. It ticks every
// tick while a stream is registered and, at each tick, signals the streams
// of one of its slots, so each stream is signalled once every
// tick × slots, within one tick of that period, and the process wakes once
// a tick for a batch of heartbeats instead of once per heartbeat (10,000
// tickers firing each at its own moment wake a thread 667 times a second).
// Its zero value is not usable: use newStreamClock.
type streamClock struct {
	tick  time.Duration
	slots []map[*streamBeat]struct{}

	mu      sync.Mutex
	next    int // the slot signalled at the next tick
	count   int
	running bool
}

// streamBeat is one stream's registration: C receives at each of its
// heartbeats; one not taken yet covers the next.
type streamBeat struct {
	C    <-chan struct{}
	c    chan struct{}
	slot int
}

// newStreamClock returns a clock that signals each stream every
// tick × slots.
func newStreamClock(tick time.Duration, slots int) *streamClock {
	c := &streamClock{tick: tick, slots: make([]map[*streamBeat]struct{}, slots)}
	for i := range c.slots {
		c.slots[i] = map[*streamBeat]struct{}{}
	}
	return c
}

// add registers a stream: its first heartbeat comes one period from now,
// to within a tick. Call remove when the stream ends.
func (c *streamClock) add() (beat *streamBeat, remove func()) {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	defer c.mu.Unlock()
	// The slot just signalled is the one signalled last again.
	b := &streamBeat{C: ch, c: ch, slot: (c.next + len(c.slots) - 1) % len(c.slots)}
	c.slots[b.slot][b] = struct{}{}
	c.count++
	if !c.running {
		c.running = true
		go c.run()
	}
	return b, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.slots[b.slot][b]; ok {
			delete(c.slots[b.slot], b)
			c.count--
		}
	}
}

// run ticks until no stream is registered at a tick.
func (c *streamClock) run() {
	t := time.NewTicker(c.tick)
	defer t.Stop()
	for range t.C {
		if !c.signal() {
			return
		}
	}
}

// signal signals the streams of the next slot; false, with the clock
// marked stopped, when no stream is registered.
func (c *streamClock) signal() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.count == 0 {
		c.running = false
		return false
	}
	for b := range c.slots[c.next] {
		select {
		case b.c <- struct{}{}:
		default: // one is pending: it covers this one
		}
	}
	c.next = (c.next + 1) % len(c.slots)
	return true
}

// isRunning reports whether the clock's goroutine runs.
func (c *streamClock) isRunning() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running
}
