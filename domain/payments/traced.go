package payments

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"boxoffice/platform/telemetry"
)

// Traced returns p with a client span around each call (tracing on), named
// for the provider and its operation and carrying the PaymentIntent's and
// the order's ids — never a client secret, an idempotency key or a body.
// Stripe's HTTP spans (a client from telemetry.HTTPClient) are its
// children, and its requests carry the trace. With tracing off it returns
// p itself.
func Traced(p Provider, name string) Provider {
	if !telemetry.Enabled() {
		return p
	}
	return &traced{p: p, name: name}
}

type traced struct {
	p    Provider
	name string
}

func (t *traced) start(ctx context.Context, op string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return telemetry.Tracer().Start(ctx, t.name+" "+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(attrs, attribute.String("boxoffice.payment_provider", t.name))...))
}

func (t *traced) CreateIntent(ctx context.Context, p CreateIntentParams) (Intent, error) {
	ctx, span := t.start(ctx, "create_intent", telemetry.OrderID.String(p.OrderID.String()))
	in, err := t.p.CreateIntent(ctx, p)
	if in.ID != "" {
		span.SetAttributes(telemetry.PaymentIntent.String(in.ID))
	}
	telemetry.EndSpan(span, err)
	return in, err
}

func (t *traced) Capture(ctx context.Context, intentID, idempotencyKey string) (Intent, error) {
	ctx, span := t.start(ctx, "capture", telemetry.PaymentIntent.String(intentID))
	in, err := t.p.Capture(ctx, intentID, idempotencyKey)
	telemetry.EndSpan(span, err)
	return in, err
}

func (t *traced) Cancel(ctx context.Context, intentID, idempotencyKey string) (Intent, error) {
	ctx, span := t.start(ctx, "cancel", telemetry.PaymentIntent.String(intentID))
	in, err := t.p.Cancel(ctx, intentID, idempotencyKey)
	telemetry.EndSpan(span, err)
	return in, err
}

func (t *traced) Refund(ctx context.Context, intentID string, amountMinor int64, idempotencyKey string) (Refund, error) {
	ctx, span := t.start(ctx, "refund", telemetry.PaymentIntent.String(intentID))
	r, err := t.p.Refund(ctx, intentID, amountMinor, idempotencyKey)
	telemetry.EndSpan(span, err)
	return r, err
}

func (t *traced) Get(ctx context.Context, intentID string) (Intent, error) {
	ctx, span := t.start(ctx, "get_intent", telemetry.PaymentIntent.String(intentID))
	in, err := t.p.Get(ctx, intentID)
	telemetry.EndSpan(span, err)
	return in, err
}

func (t *traced) List(ctx context.Context, createdFrom, createdTo time.Time) ([]Intent, error) {
	ctx, span := t.start(ctx, "list_intents")
	ins, err := t.p.List(ctx, createdFrom, createdTo)
	telemetry.EndSpan(span, err)
	return ins, err
}
