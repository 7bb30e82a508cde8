package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpSink is an OTLP/HTTP trace receiver that decodes every export, as a
// collector would, counts its spans and keeps nothing: the far end of
// `bench purchases -tracing`.
type otlpSink struct {
	url   string
	srv   *http.Server
	spans atomic.Int64
}

func newOTLPSink(ctx context.Context) (*otlpSink, error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &otlpSink{url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.export), ReadHeaderTimeout: 5e9}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			panic(err)
		}
	}()
	return s, nil
}

func (s *otlpSink) export(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil {
		http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
		return
	}
	var n int64
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			n += int64(len(ss.Spans))
		}
	}
	s.spans.Add(n)
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// count is the spans received so far; 0 for a nil sink.
func (s *otlpSink) count() int64 {
	if s == nil {
		return 0
	}
	return s.spans.Load()
}

func (s *otlpSink) close() { _ = s.srv.Close() }
