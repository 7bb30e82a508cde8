package consumers

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"boxoffice/platform/telemetry"
)

// startSpans starts, for a batch (tracing on), the batch's span and each
// delivery's process span: the child of the span whose traceparent the
// message carries (the relay's publish), so that a handler's work, its
// provider call and the events it writes to the outbox continue the
// trace the event came with. The batch's span links to every message's
// trace; each process span links back to the batch. It returns ctx with
// the batch's span, and the function that ends the spans once the batch
// is settled, each process span with its delivery's error.
func (c *Consumer) startSpans(ctx context.Context, items []*item) (context.Context, func()) {
	tracer := telemetry.Tracer()
	parents := make([]context.Context, len(items))
	links := make([]trace.Link, 0, len(items))
	for i, it := range items {
		parents[i] = telemetry.Continue(context.Background(), telemetry.MessageParent(it.msg.Headers()))
		if sc := trace.SpanContextFromContext(parents[i]); sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	bctx, batch := tracer.Start(ctx, "consume "+c.cfg.Name,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(links...),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String("nats"),
			semconv.MessagingOperationTypeReceive,
			semconv.MessagingConsumerGroupName(c.cfg.Name),
			semconv.MessagingBatchMessageCount(len(items)),
		))
	for i, it := range items {
		attrs := []attribute.KeyValue{
			semconv.MessagingSystemKey.String("nats"),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(it.msg.Subject()),
			semconv.MessagingConsumerGroupName(c.cfg.Name),
			semconv.MessagingMessageID(it.ev.EventID.String()),
			telemetry.Consumer.String(c.cfg.Name),
			telemetry.EventID.String(it.ev.EventID.String()),
			telemetry.EventType.String(it.ev.EventType),
			telemetry.OrderID.String(it.ev.AggregateID.String()),
			telemetry.StreamSeq.Int64(int64(it.d.streamSeq)),
			attribute.Int64("messaging.nats.delivery_count", int64(it.d.numDelivered)),
		}
		if it.ev.CausationID != "" {
			attrs = append(attrs, telemetry.CausationID.String(it.ev.CausationID))
		}
		pctx, span := tracer.Start(parents[i], "process "+it.ev.EventType,
			trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithLinks(trace.Link{SpanContext: batch.SpanContext()}),
			trace.WithAttributes(attrs...))
		it.span = span
		it.ev.TraceParent = telemetry.TraceParent(pctx)
	}
	return bctx, func() {
		for _, it := range items {
			span := it.span
			span.SetAttributes(attribute.String("boxoffice.outcome", it.o.kind.String()))
			telemetry.EndSpan(span, it.o.err)
		}
		batch.End()
	}
}
