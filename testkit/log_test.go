package testkit

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the failure and stops the
// calling goroutine, as FailNow does, without failing the real test.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	failed []string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failed = append(r.failed, fmt.Sprintf(format, args...))
	r.mu.Unlock()
	panic(r)
}

// run calls f with r and reports whether f failed through r.
func (r *recorder) run(f func(testing.TB)) (failure string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if p := recover(); p != nil && p != r {
				panic(p)
			}
		}()
		f(r)
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.failed, "\n")
}

func TestLogCapturesJSONLines(t *testing.T) {
	t.Parallel()
	l := NewLog(t)
	l.Logger.Debug("first", "order_id", "o-1")
	l.Logger.Info("second", "n", 2)
	lines := l.Lines(t)
	if len(lines) != 2 || lines[0]["msg"] != "first" || lines[0]["order_id"] != "o-1" || lines[0]["level"] != "DEBUG" || lines[1]["n"] != 2.0 {
		t.Fatalf("lines = %v", lines)
	}
	if !l.Contains(`"msg":"second"`) || l.Count(`"msg"`) != 2 {
		t.Fatalf("log = %s", l.String())
	}
}

func TestLogLevelAndText(t *testing.T) {
	t.Parallel()
	l := NewLog(t, Level(slog.LevelWarn), Text())
	l.Logger.Info("dropped")
	l.Logger.Warn("kept", "k", "v")
	if l.Contains("dropped") || !l.Contains("msg=kept k=v") {
		t.Fatalf("log = %s", l.String())
	}
	r := &recorder{TB: t}
	if got := r.run(func(tb testing.TB) { l.Lines(tb) }); !strings.Contains(got, "text format") {
		t.Fatalf("Lines on a text log: %q", got)
	}
}

func TestWaitForWakesOnAWrite(t *testing.T) {
	t.Parallel()
	l := NewLog(t)
	go func() {
		time.Sleep(20 * time.Millisecond)
		l.Logger.Info("noise")
		l.Logger.Info("wanted", "id", "x")
	}()
	line := l.WaitForLine(t, 10*time.Second, "the wanted line", func(line Line) bool { return line["msg"] == "wanted" })
	if line["id"] != "x" {
		t.Fatalf("line = %v", line)
	}
	var b Buffer
	go func() { _, _ = b.Write([]byte("a ready b")) }()
	b.WaitFor(t, 10*time.Second, "ready")
}

func TestWaitForTimesOut(t *testing.T) {
	t.Parallel()
	l := NewLog(t)
	l.Logger.Info("other")
	r := &recorder{TB: t}
	got := r.run(func(tb testing.TB) {
		l.WaitForLine(tb, 50*time.Millisecond, "a line that never comes", func(line Line) bool { return line["msg"] == "never" })
	})
	if !strings.Contains(got, "timed out after 50ms waiting for a line that never comes") {
		t.Fatalf("failure = %q", got)
	}
	r = &recorder{TB: t}
	if got := r.run(func(tb testing.TB) { l.WaitFor(tb, 50*time.Millisecond, "never") }); !strings.Contains(got, `"never"`) {
		t.Fatalf("failure = %q", got)
	}
}

func TestRequireNoSecrets(t *testing.T) {
	t.Parallel()
	l := NewLog(t)
	l.Logger.Info("paid", "intent", "pi_1")
	l.Logger.Info("token", "value", "tok_SECRET")
	l.RequireNoSecrets(t, "whsec_x", "pi_secret_y")

	r := &recorder{TB: t}
	got := r.run(func(tb testing.TB) { l.RequireNoSecrets(tb, "whsec_x", "tok_SECRET") })
	if !strings.Contains(got, `secret 2 of 2 ("tok_SECRET") reached the logs: {`) || !strings.Contains(got, `"msg":"token"`) {
		t.Fatalf("failure = %q", got)
	}
	r = &recorder{TB: t}
	if got := r.run(func(tb testing.TB) { l.RequireNoSecrets(tb, "") }); !strings.Contains(got, "empty") {
		t.Fatalf("failure = %q", got)
	}
	var split Log
	_, _ = split.Write([]byte("ab\ncd"))
	r = &recorder{TB: t}
	if got := r.run(func(tb testing.TB) { split.RequireNoSecrets(tb, "b\nc") }); !strings.Contains(got, "reached the logs") {
		t.Fatalf("failure = %q", got)
	}
}
