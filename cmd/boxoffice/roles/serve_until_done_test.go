package roles

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A request in flight when the context ends is answered before
// serveUntilDone returns nil; no new connection is taken after it.
func TestServeUntilDoneLetsInFlightRequestsFinish(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	inFlight, release := make(chan struct{}), make(chan struct{})
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(inFlight)
		<-release
		_, _ = io.WriteString(w, "done")
	})}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serveUntilDone(ctx, srv, ln, "test", 10*time.Second) }()

	answered := make(chan string, 1)
	go func() {
		res, err := http.Get("http://" + ln.Addr().String())
		if err != nil {
			answered <- "error: " + err.Error()
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		answered <- string(b)
	}()
	<-inFlight
	cancel()
	// Shutdown closes the listener first: once a dial is refused, the
	// server is draining, and the request is still held.
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	}, 10*time.Second, 5*time.Millisecond)
	close(release)
	require.Equal(t, "done", <-answered)
	require.NoError(t, <-served)
}

// A server that stops serving on its own (its listener closed) is an
// error named for it, returned at once.
func TestServeUntilDoneReportsAServerThatStops(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, ln.Close())
	err = serveUntilDone(context.Background(), &http.Server{ReadHeaderTimeout: time.Second}, ln, "metrics", time.Second)
	require.ErrorContains(t, err, "serve metrics: ")
}
