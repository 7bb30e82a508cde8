-- Issue 29: OpenTelemetry traces follow a purchase across processes. The
-- W3C traceparent of the span that caused a row is stored with it, where
-- OpenTelemetry's own propagation cannot go:
--
--   outbox.trace_parent            the span that wrote the event; the relay
--                                  publishes it as the message's traceparent
--                                  header, and the consumer's span continues it.
--   orders.trace_parent            the hold request's span: the provider's
--                                  webhooks, which carry no trace of ours,
--                                  continue the order's trace from it.
--   webhook_messages.trace_parent  the span that fanned the event out: each
--                                  delivery attempt continues it, and its
--                                  request carries it as traceparent.
--
-- NULL when tracing is off (the default): nothing is stored or read then.
-- A traceparent holds ids and flags only, never a secret.
--
-- hold_reserve gains p_trace_parent and outbox_claim returns trace_parent:
-- their old signatures are dropped here, and functions/ defines the new
-- ones (applied by migrations.Up right after the versioned migrations).

-- +goose Up
ALTER TABLE outbox ADD COLUMN trace_parent text;
ALTER TABLE orders ADD COLUMN trace_parent text;
ALTER TABLE webhook_messages ADD COLUMN trace_parent text;
DROP FUNCTION IF EXISTS hold_reserve(uuid, uuid[], uuid, uuid, uuid, interval, text, bytea, interval, text, uuid, integer, uuid);
DROP FUNCTION IF EXISTS outbox_claim(text, integer, interval, boolean, bigint);

-- +goose Down
DROP FUNCTION IF EXISTS hold_reserve(uuid, uuid[], uuid, uuid, uuid, interval, text, bytea, interval, text, uuid, integer, uuid, text);
DROP FUNCTION IF EXISTS outbox_claim(text, integer, interval, boolean, bigint);
ALTER TABLE webhook_messages DROP COLUMN trace_parent;
ALTER TABLE orders DROP COLUMN trace_parent;
ALTER TABLE outbox DROP COLUMN trace_parent;
