package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"boxoffice/platform/telemetry"
)

func TestWantedFollowsTheStandardVariables(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_SERVICE_NAME": "x"}, false},
	} {
		require.Equal(t, c.want, telemetry.Wanted(func(k string) string { return c.env[k] }), "%v", c.env)
	}
}

// Off, nothing is stored and log lines are as before; on, a span's
// traceparent is what is stored, and a line written in its context names
// its trace and span.
func TestTraceParentAndLogLinesFollowTheSwitch(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&buf, nil)))
	line := func(ctx context.Context) map[string]any {
		buf.Reset()
		logger.With("a", 1).InfoContext(ctx, "x")
		var m map[string]any
		require.NoError(t, json.Unmarshal(buf.Bytes(), &m))
		return m
	}

	ctx, span := telemetry.Tracer().Start(context.Background(), "off")
	require.Empty(t, telemetry.TraceParent(ctx))
	require.Nil(t, telemetry.StoredParent(ctx))
	require.NotContains(t, line(ctx), "trace_id")
	span.End()

	shutdown, err := telemetry.Setup(context.Background(), func(k string) string {
		return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}[k]
	}, telemetry.Process{Service: "test"})
	require.NoError(t, err)
	require.True(t, telemetry.Enabled())
	ctx, span = telemetry.Tracer().Start(context.Background(), "on")
	tp := telemetry.TraceParent(ctx)
	require.Regexp(t, "^00-"+span.SpanContext().TraceID().String()+"-"+span.SpanContext().SpanID().String()+"-01$", tp)
	continued := trace.SpanContextFromContext(telemetry.Continue(context.Background(), tp))
	require.Equal(t, span.SpanContext().TraceID(), continued.TraceID(), "what is stored is continued")
	require.Equal(t, span.SpanContext().SpanID(), continued.SpanID())
	m := line(ctx)
	require.Equal(t, span.SpanContext().TraceID().String(), m["trace_id"])
	require.Equal(t, span.SpanContext().SpanID().String(), m["span_id"])
	require.EqualValues(t, 1, m["a"])
	require.NotContains(t, line(context.Background()), "trace_id", "no span, no ids")
	span.End()

	h := map[string][]string{}
	telemetry.InjectMessage(ctx, h)
	require.Equal(t, tp, telemetry.MessageParent(h), "a NATS message carries the traceparent as spelled")

	ctxShut, cancel := context.WithCancel(context.Background())
	cancel() // nothing to flush that can reach 127.0.0.1:1
	_ = shutdown(ctxShut)
	require.False(t, telemetry.Enabled())
	require.Empty(t, telemetry.TraceParent(ctx), "off again, nothing stored")
}
