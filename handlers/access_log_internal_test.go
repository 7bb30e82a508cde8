package handlers

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkMiddleware measures what the request middleware (correlation
// id, recovery, the access log line) costs a request, at the level the
// line is written (info) and at one that drops it (warn).
func BenchmarkMiddleware(b *testing.B) {
	for _, bc := range []struct {
		name  string
		level slog.Level
	}{{"LineWritten", slog.LevelInfo}, {"LineDropped", slog.LevelWarn}} {
		b.Run(bc.name, func(b *testing.B) {
			h := &Handlers{logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: bc.level})).With("component", "http")}
			next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
			mw := h.middleware(next)
			req := httptest.NewRequest(http.MethodGet, "/v1/orders/0190d6c2-7f3a-7c1e-9a55-2f0c1d3e4b5a", nil)
			req.Header.Set("X-Correlation-Id", "0190d6c2-7f3a-7c1e-9a55-2f0c1d3e4b5b")
			w := &discardWriter{h: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				mw.ServeHTTP(w, req)
			}
		})
	}
}

// discardWriter is a ResponseWriter that keeps nothing, so the benchmark
// counts the middleware's allocations, not a recorder's.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// validCorrelationID accepts exactly what correlationPattern, the
// pattern the OpenAPI document gives, matches.
func TestValidCorrelationIDMatchesThePattern(t *testing.T) {
	t.Parallel()
	for _, id := range []string{
		"", "a", "0190d6c2-7f3a-7c1e-9a55-2f0c1d3e4b5b", "A.b_c:d-e", strings.Repeat("x", 64), strings.Repeat("x", 65),
		"has space", "semi;colon", "slash/", "ünïcode", "new\nline", "tab\t", "<script>", "a+b", "a=b",
	} {
		require.Equal(t, correlationPattern.MatchString(id), validCorrelationID(id), "%q", id)
	}
}

// The access log line carries the same five fields it always has, and a
// handler sees the request's correlation id and start.
func TestAccessLogLine(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	h := &Handlers{logger: slog.New(slog.NewJSONHandler(&buf, nil))}
	var seen string
	mw := h.middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = CorrelationID(r.Context())
		require.False(t, requestStart(r.Context()).IsZero())
		w.WriteHeader(http.StatusTeapot)
	}))
	req := httptest.NewRequest(http.MethodGet, "/v1/things?secret=x", nil)
	req.Header.Set("X-Correlation-Id", "journey-1")
	rec := httptest.NewRecorder()
	mw.ServeHTTP(rec, req)

	require.Equal(t, "journey-1", seen)
	require.Equal(t, "journey-1", rec.Header().Get("X-Correlation-Id"))
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line))
	require.Equal(t, "http request", line["msg"])
	require.Equal(t, "journey-1", line["correlation_id"])
	require.Equal(t, "GET", line["method"])
	require.Equal(t, "/v1/things", line["path"], "never the query string")
	require.EqualValues(t, http.StatusTeapot, line["status"])
	require.Contains(t, line, "duration_ms")
}
