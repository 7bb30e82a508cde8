package handlers

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// opsWriter records what a stream does to its response: "write <data>"
// and "flush", in order.
type opsWriter struct {
	header http.Header
	ops    chan string
}

func (w *opsWriter) Header() http.Header { return w.header }
func (w *opsWriter) WriteHeader(int)     {}
func (w *opsWriter) Write(p []byte) (int, error) {
	w.ops <- "write " + strings.TrimSpace(string(p))
	return len(p), nil
}
func (w *opsWriter) Flush() { w.ops <- "flush" }

// A stream's writes reach the client before it waits, and what one read
// writes in one flush; the last event is left to the response's end,
// which sends it with the end of the stream.
func TestFollowFeedFlushesBeforeItWaits(t *testing.T) {
	t.Parallel()
	h := &Handlers{heartbeats: newStreamClock(time.Hour, 1)}
	rw := &opsWriter{header: http.Header{}, ops: make(chan string, 100)}
	w := &sseWriter{w: rw, rc: http.NewResponseController(rw)}
	next := func() string {
		t.Helper()
		select {
		case op := <-rw.ops:
			return op
		case <-time.After(5 * time.Second):
			t.Fatal("the stream did nothing within 5 s")
			return ""
		}
	}
	// Each read writes the next step's events: the last ends the stream.
	steps := make(chan []string)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !w.write([]byte("opening")) {
			return
		}
		h.followFeed(context.Background(), w, feedFollower{
			firstRead: time.Millisecond,
			read: func(_ context.Context, schedule func(time.Duration)) bool {
				schedule(time.Millisecond)
				for _, ev := range <-steps {
					if !w.write([]byte(ev)) || ev == "ticketed" {
						return false
					}
				}
				return true
			},
		})
	}()
	require.Equal(t, "write opening", next())
	require.Equal(t, "flush", next(), "the opening goes out before the stream waits")

	steps <- []string{"capture_pending", "paid"}
	require.Equal(t, "write capture_pending", next())
	require.Equal(t, "write paid", next())
	require.Equal(t, "flush", next(), "one flush for the read's two events")

	steps <- []string{"ticketed"}
	require.Equal(t, "write ticketed", next())
	<-done
	require.Empty(t, rw.ops, "the last event is not flushed on its own: the response's end sends it")
}
