// Package natstest runs a real JetStream server inside a test process: an
// embedded nats-server with file storage in the test's temporary directory.
// A Server can be stopped and started again on the same port and store, to
// test what happens while the bus is down.
package natstest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"boxoffice/platform/bus"
)

// Server is an embedded JetStream server owned by one test.
type Server struct {
	mu   sync.Mutex
	opts server.Options
	srv  *server.Server
	// URL is the client URL; it stays the same across Restart.
	URL string
}

// New starts a server with the streams provisioned (bus.Provision with
// defaults) and stops it when the test ends.
func New(tb testing.TB) *Server {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(tb, ln.Close())
	s := &Server{
		opts: server.Options{
			Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: tb.TempDir(),
			NoSigs: true, NoLog: true, MaxPayload: 8 << 20,
		},
		URL: fmt.Sprintf("nats://127.0.0.1:%d", port),
	}
	s.Start(tb)
	tb.Cleanup(s.Stop)
	_, js := s.Connect(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(tb, bus.Provision(ctx, js, bus.Config{}))
	return s
}

// Start starts the server (again) on its port and store directory.
func (s *Server) Start(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	opts := s.opts
	srv, err := server.NewServer(&opts)
	require.NoError(tb, err)
	srv.Start()
	require.True(tb, srv.ReadyForConnections(10*time.Second), "nats server not ready")
	s.srv = srv
}

// Stop shuts the server down and waits until it has; clients see the
// connection drop and reconnect when Start runs again.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
		s.srv = nil
	}
}

// Connect opens a client connection the way the application does
// (bus.Connect) and closes it when the test ends.
func (s *Server) Connect(tb testing.TB) (*nats.Conn, jetstream.JetStream) {
	tb.Helper()
	nc, js, err := bus.Connect(s.URL, tb.Name(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(tb, err)
	tb.Cleanup(nc.Close)
	return nc, js
}
