// Package telemetry is Boxoffice's OpenTelemetry tracing: the process's
// tracer provider, exported over OTLP, and the few helpers that carry a
// trace across the places where OpenTelemetry's own instrumentation
// cannot follow it — an outbox row, a JetStream message, an order waiting
// for its provider's webhook, an organizer's webhook message.
//
// Tracing is off unless the standard OpenTelemetry variables ask for it:
// OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set,
// and neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none. Every
// other OTEL_ variable (headers, protocol timeouts, OTEL_TRACES_SAMPLER,
// OTEL_BSP_*, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) means what the
// specification says; the exporter is OTLP over HTTP.
//
// Off, nothing is recorded and nothing is stored: TraceParent returns ""
// (no column, header or attribute gets a value), Enabled is false and the
// instrumented places skip their spans, so a purchase costs what it cost
// before tracing existed.
//
// # What a span may hold
//
// Span names and attributes follow OpenTelemetry's semantic conventions
// (HTTP, database, messaging) plus the seed's fields under "boxoffice.":
// order, hold, PaymentIntent, event id and type, causation id, cell and
// region epoch. Never a secret, token, client secret, card datum, request
// or response body, or SQL parameter: the database spans carry the
// statement's text only (pgx's parameters are never recorded), and HTTP
// spans the method, route, status and peer. A test of the whole purchase
// scans every exported span for the secrets it used.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Instrumentation is the name of Boxoffice's own tracer.
const Instrumentation = "boxoffice"

// Attribute keys of the seed's fields. The rest are OpenTelemetry's.
const (
	OrderID       = attribute.Key("boxoffice.order.id")
	HoldID        = attribute.Key("boxoffice.hold.id")
	PaymentIntent = attribute.Key("boxoffice.payment_intent.id")
	EventID       = attribute.Key("boxoffice.event.id")
	EventType     = attribute.Key("boxoffice.event.type")
	CausationID   = attribute.Key("boxoffice.causation.id")
	Consumer      = attribute.Key("boxoffice.consumer")
	Cell          = attribute.Key("boxoffice.cell")
	RegionEpoch   = attribute.Key("boxoffice.region_epoch")
	StreamSeq     = attribute.Key("boxoffice.stream.sequence")
)

// enabled is set once Setup has installed an exporting provider.
var enabled atomic.Bool

// Enabled reports whether this process exports spans. The instrumented
// places check it before doing anything, so that tracing off costs
// nothing.
func Enabled() bool { return enabled.Load() }

// Wanted reports whether the environment, read through getenv, asks for
// tracing (see the package documentation).
func Wanted(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Process names the process in its spans' resource.
type Process struct {
	// Service is service.name unless OTEL_SERVICE_NAME overrides it:
	// "boxoffice-serve", "boxoffice-work"…
	Service string
	// Version is service.version ("" for a development build).
	Version string
	// Cell and RegionEpoch are the process's cell and region epoch.
	Cell        string
	RegionEpoch int64
}

// Setup installs the process's tracer provider and the W3C trace-context
// propagator when getenv asks for tracing, and returns the function that
// flushes and stops it (call it on the way out; it is a no-op when
// tracing is off). The endpoint and OTEL_BSP_SCHEDULE_DELAY are read
// through getenv; the exporter reads its other OTEL_EXPORTER_OTLP_*
// variables from the process's environment. The provider is the
// process's one (OpenTelemetry's global): set up one per process.
func Setup(ctx context.Context, getenv func(string) string, p Process) (shutdown func(context.Context) error, err error) {
	nothing := func(context.Context) error { return nil }
	if !Wanted(getenv) {
		return nothing, nil
	}
	var opts []otlptracehttp.Option
	switch {
	case getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "":
		opts = append(opts, otlptracehttp.WithEndpointURL(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")))
	case getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "":
		opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimRight(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "/")+"/v1/traces"))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nothing, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(p.Service), Cell.String(p.Cell), RegionEpoch.Int64(p.RegionEpoch)}
	if p.Version != "" {
		attrs = append(attrs, semconv.ServiceVersion(p.Version))
	}
	if host, err := os.Hostname(); err == nil {
		attrs = append(attrs, semconv.ServiceInstanceID(host))
	}
	// resource.Default reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// and wins over ours.
	res, err := resource.Merge(resource.NewWithAttributes(semconv.SchemaURL, attrs...), resource.Default())
	if err != nil && !errors.Is(err, resource.ErrSchemaURLConflict) {
		return nothing, fmt.Errorf("telemetry: resource: %w", err)
	}
	var batch []sdktrace.BatchSpanProcessorOption
	if ms, err := strconv.Atoi(getenv("OTEL_BSP_SCHEDULE_DELAY")); err == nil && ms > 0 {
		batch = append(batch, sdktrace.WithBatchTimeout(time.Duration(ms)*time.Millisecond))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, batch...), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	enabled.Store(true)
	return func(ctx context.Context) error {
		enabled.Store(false)
		otel.SetTracerProvider(noop.NewTracerProvider())
		return tp.Shutdown(ctx)
	}, nil
}

// Tracer is Boxoffice's tracer, from the installed provider.
func Tracer() trace.Tracer { return otel.Tracer(Instrumentation) }

// traceContext is the W3C propagator, used directly (not the global one)
// so that a stored traceparent means the same whatever is installed.
var traceContext = propagation.TraceContext{}

// TraceParent returns the W3C traceparent of the span in ctx, to store
// with what ctx caused (an outbox row, an order, a webhook message), or
// "" when tracing is off or ctx has no sampled span.
func TraceParent(ctx context.Context) string {
	if !Enabled() {
		return ""
	}
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c["traceparent"]
}

// Continue returns ctx with the remote span context that traceparent
// names as its parent, for the span that continues the stored trace. An
// empty or malformed traceparent leaves ctx as it is.
func Continue(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}

// Inject writes ctx's span into h as a traceparent header (an outgoing
// HTTP request's).
func Inject(ctx context.Context, h http.Header) {
	traceContext.Inject(ctx, propagation.HeaderCarrier(h))
}

// InjectMessage writes ctx's span into a NATS message's headers as
// "traceparent" (and "tracestate" when there is one), spelled as the W3C
// specification spells them: NATS headers, unlike HTTP's, are case
// sensitive.
func InjectMessage(ctx context.Context, h map[string][]string) {
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	for k, v := range c {
		h[k] = []string{v}
	}
}

// MessageParent is the traceparent a NATS message's headers carry, ""
// when none.
func MessageParent(h map[string][]string) string {
	if v := h["traceparent"]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// EndSpan records err (when not nil) on span and ends it.
func EndSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// PgxTracer is the query tracer of the process's pools: OpenTelemetry's
// pgx instrumentation (github.com/exaring/otelpgx), recording each
// statement's text but never its parameters, or nil when tracing is off.
func PgxTracer() pgx.QueryTracer {
	if !Enabled() {
		return nil
	}
	return otelpgx.NewTracer(otelpgx.WithDisableConnectionDetailsInAttributes())
}

// StoredParent is TraceParent as a nullable column's value: nil (NULL)
// when there is none.
func StoredParent(ctx context.Context) *string {
	tp := TraceParent(ctx)
	if tp == "" {
		return nil
	}
	return &tp
}

// HTTPHandler returns next with a server span per request (tracing on),
// continuing the caller's traceparent and named for the route pattern the
// ServeMux matched ("POST /v1/events/{eventId}/holds"); next itself when
// tracing is off. Wrap the ServeMux directly, so the span sees its
// pattern.
func HTTPHandler(next http.Handler, operation string) http.Handler {
	if !Enabled() {
		return next
	}
	return otelhttp.NewHandler(next, operation, otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		if r.Pattern != "" {
			return r.Pattern
		}
		return r.Method
	}))
}

// HTTPClient returns hc (nil: a new client) with a client span per request
// that carries the trace as traceparent (tracing on); hc itself when
// tracing is off.
func HTTPClient(hc *http.Client) *http.Client {
	if !Enabled() {
		return hc
	}
	copied := http.Client{}
	if hc != nil {
		copied = *hc
	}
	base := copied.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	copied.Transport = otelhttp.NewTransport(base)
	return &copied
}

// Annotate adds attrs to the span in ctx (tracing on): what a handler
// learned that the span's name does not say, such as the order a request
// created.
func Annotate(ctx context.Context, attrs ...attribute.KeyValue) {
	if Enabled() {
		trace.SpanFromContext(ctx).SetAttributes(attrs...)
	}
}
