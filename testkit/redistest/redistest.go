// Package redistest gives tests a real Redis.
//
// New connects to REDIS_TEST_URL, else redis://127.0.0.1:6379/0; when that
// does not answer and a redis-server binary is on PATH, it starts a private
// one for the test process on a random port in a temporary directory; when
// neither is possible the test is skipped with a message saying how to get
// Redis (apt install redis-server). Each test gets a unique key prefix, and
// its keys are deleted when it ends, so tests share one server safely.
//
// StartServer starts a private redis-server owned by one test, which may
// kill and restart it: for failure tests that must never disturb a shared
// server.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

var (
	once     sync.Once
	sharedOK string // the URL that answered, or ""
	why      string
)

// New returns a client on the test Redis and a key prefix unique to the
// test; every key under the prefix is deleted when the test ends.
func New(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	once.Do(findServer)
	if sharedOK == "" {
		tb.Skipf("redistest: no Redis: %s. Install one (apt install redis-server) or set REDIS_TEST_URL.", why)
	}
	opts, err := redis.ParseURL(sharedOK)
	require.NoError(tb, err)
	opts.PoolSize = 64
	rdb := redis.NewClient(opts)
	prefix := "boxoffice-test:" + randomHex(6) + ":"
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
			if len(keys) == 1000 {
				_ = rdb.Unlink(ctx, keys...).Err()
				keys = keys[:0]
			}
		}
		if len(keys) > 0 {
			_ = rdb.Unlink(ctx, keys...).Err()
		}
		_ = rdb.Close()
	})
	return rdb, prefix
}

func ping(url string) error {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	opts.DialTimeout = time.Second
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return rdb.Ping(ctx).Err()
}

func findServer() {
	url := os.Getenv("REDIS_TEST_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	err := ping(url)
	if err == nil {
		sharedOK = url
		return
	}
	if _, lookErr := exec.LookPath("redis-server"); lookErr != nil {
		why = fmt.Sprintf("%s does not answer (%v) and no redis-server is on PATH", url, err)
		return
	}
	dir, derr := os.MkdirTemp("", "boxoffice-redistest-")
	if derr != nil {
		why = derr.Error()
		return
	}
	s, serr := start(dir, freePort())
	if serr != nil {
		why = fmt.Sprintf("%s does not answer (%v) and a private redis-server did not start: %v", url, err, serr)
		return
	}
	// Pdeathsig kills it when this process exits; its directory is a
	// temporary one.
	sharedOK = s.URL
}

// Server is a private redis-server process.
type Server struct {
	dir  string
	port int
	cmd  *exec.Cmd
	// URL is redis://127.0.0.1:<port>/0; it stays the same across
	// Restart.
	URL string
}

// StartServer starts a private redis-server with append-only persistence
// (fsync on every write) in a temporary directory, and stops it when the
// test ends. It skips the test when no redis-server binary is on PATH.
func StartServer(tb testing.TB) *Server {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Skip("redistest: no redis-server on PATH; install it with apt install redis-server")
	}
	s, err := start(tb.TempDir(), freePort())
	require.NoError(tb, err)
	tb.Cleanup(s.Kill)
	return s
}

func start(dir string, port int) (*Server, error) {
	s := &Server{dir: dir, port: port, URL: fmt.Sprintf("redis://127.0.0.1:%d/0", port)}
	return s, s.run()
}

func (s *Server) run() error {
	s.cmd = exec.Command("redis-server", "--port", fmt.Sprint(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--appendonly", "yes", "--appendfsync", "always", "--save", "",
		"--logfile", filepath.Join(s.dir, "redis.log"))
	// The server dies with the test process, however that ends.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping(s.URL)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redis-server on port %d did not answer: %w", s.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill kills the server at once (SIGKILL), as a crash would.
func (s *Server) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// Restart starts the server again on the same port and directory, so its
// append-only file brings back every acknowledged write.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	require.NoError(tb, s.run())
}

// Client returns a client on the server, closed when the test ends.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	opts, err := redis.ParseURL(s.URL)
	require.NoError(tb, err)
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = time.Second, time.Second, time.Second
	rdb := redis.NewClient(opts)
	tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
