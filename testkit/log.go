package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer is an io.Writer that any number of goroutines may write to while a
// test reads what they wrote. Its zero value is empty and ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	// grew is closed, and replaced, by every Write: a waiter blocks on it
	// instead of polling.
	grew chan struct{}
}

// Write appends p. It never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.grew != nil {
		close(b.grew)
		b.grew = nil
	}
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Contains says whether s has been written (within one or across writes).
func (b *Buffer) Contains(s string) bool { return strings.Contains(b.String(), s) }

// Count returns how many non-overlapping times s has been written.
func (b *Buffer) Count(s string) int { return strings.Count(b.String(), s) }

// WaitFor blocks until s has been written and fails the test (FailNow) if
// it has not within timeout. It wakes on every write, not on a timer.
func (b *Buffer) WaitFor(t testing.TB, timeout time.Duration, s string) {
	t.Helper()
	b.waitUntil(t, timeout, fmt.Sprintf("%q to be written", s), func(out string) bool { return strings.Contains(out, s) })
}

// waitUntil blocks until ok holds for everything written so far, and fails
// the test if it does not within timeout.
func (b *Buffer) waitUntil(t testing.TB, timeout time.Duration, what string, ok func(string) bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		b.mu.Lock()
		out := b.buf.String()
		if b.grew == nil {
			b.grew = make(chan struct{})
		}
		grew := b.grew
		b.mu.Unlock()
		if ok(out) {
			return
		}
		select {
		case <-grew:
		case <-deadline.C:
			t.Fatalf("testkit: timed out after %s waiting for %s", timeout, what)
		}
	}
}

// Line is one decoded JSON log line: "time", "level", "msg" and the
// record's attributes, groups as nested maps.
type Line = map[string]any

// Log captures what Logger writes. Logger writes one JSON object a line
// (unless Text is given) at debug level and up (unless Level says
// otherwise). Log is also the io.Writer behind Logger, so other handlers
// may write into the same capture.
type Log struct {
	Buffer
	// Logger writes into the capture.
	Logger *slog.Logger
	text   bool
}

// LogOption changes what NewLog's Logger writes.
type LogOption func(*logConfig)

type logConfig struct {
	level slog.Leveler
	text  bool
}

// Level sets the lowest level Logger writes. The default is slog.LevelDebug.
func Level(l slog.Leveler) LogOption { return func(c *logConfig) { c.level = l } }

// Text makes Logger write slog's text format instead of JSON. Lines and
// WaitForLine then fail the test: they decode JSON only.
func Text() LogOption { return func(c *logConfig) { c.text = true } }

// dumpTail bounds what a failed test is shown of its captured log.
const dumpTail = 64 << 10

// NewLog returns an empty capture for t. When t fails, the end of what was
// captured (the last 64 KiB) is written to t's log, so a failure shows what
// the code logged.
func NewLog(t testing.TB, opts ...LogOption) *Log {
	t.Helper()
	cfg := logConfig{level: slog.LevelDebug}
	for _, o := range opts {
		o(&cfg)
	}
	l := &Log{text: cfg.text}
	hopts := &slog.HandlerOptions{Level: cfg.level}
	if cfg.text {
		l.Logger = slog.New(slog.NewTextHandler(l, hopts))
	} else {
		l.Logger = slog.New(slog.NewJSONHandler(l, hopts))
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		out := l.String()
		if len(out) > dumpTail {
			out = "…" + out[len(out)-dumpTail:]
		}
		t.Logf("testkit: captured log:\n%s", out)
	})
	return l
}

// Lines decodes every line captured so far, in the order written. A line
// that is not a JSON object fails the test.
func (l *Log) Lines(t testing.TB) []Line {
	t.Helper()
	lines, err := l.decode()
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	return lines
}

func (l *Log) decode() ([]Line, error) {
	if l.text {
		return nil, fmt.Errorf("the log is in text format; only JSON lines decode")
	}
	var out []Line
	for raw := range strings.Lines(l.String()) {
		var m Line
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			return nil, fmt.Errorf("log line %q is not JSON: %w", raw, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// WaitForLine blocks until a line for which match returns true has been
// written, and returns the first such line. It fails the test (FailNow),
// naming what, if none has been written within timeout, or if a line does
// not decode. It wakes on every write, not on a timer.
func (l *Log) WaitForLine(t testing.TB, timeout time.Duration, what string, match func(Line) bool) Line {
	t.Helper()
	var found Line
	var bad error
	l.waitUntil(t, timeout, what, func(string) bool {
		lines, err := l.decode()
		if err != nil {
			bad = err
			return true
		}
		for _, line := range lines {
			if match(line) {
				found = line
				return true
			}
		}
		return false
	})
	if bad != nil {
		t.Fatalf("testkit: waiting for %s: %v", what, bad)
	}
	return found
}

// RequireNoSecrets fails the test (FailNow) if any of secrets appears in
// what was captured, naming the secret's position in the list and the lines
// that carry it. An empty secret is a mistake in the test and fails it.
func (l *Log) RequireNoSecrets(t testing.TB, secrets ...string) {
	t.Helper()
	out := l.String()
	var leaks []string
	for i, s := range secrets {
		if s == "" {
			t.Fatalf("testkit: secret %d of %d is empty", i+1, len(secrets))
		}
		if !strings.Contains(out, s) {
			continue
		}
		leak := fmt.Sprintf("secret %d of %d (%q) reached the logs", i+1, len(secrets), s)
		n := len(leaks)
		for line := range strings.Lines(out) {
			if strings.Contains(line, s) {
				leaks = append(leaks, leak+": "+strings.TrimSpace(line))
			}
		}
		if len(leaks) == n { // across a line break
			leaks = append(leaks, leak)
		}
	}
	if len(leaks) > 0 {
		t.Fatalf("testkit: %s", strings.Join(leaks, "\n"))
	}
}
