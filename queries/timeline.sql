-- Queries of one order's timeline (domain/timeline), which reads across
-- the tables of several owners and writes nothing. None reads a secret:
-- no client secret, no QR payload, no webhook body or response, no
-- endpoint URL or secret.

-- name: TimelineOrder :one
-- The order, its event's organizer and its hold (the hold's columns are
-- null for none).
SELECT o.id, o.event_id, e.organizer_id, o.status, o.amount_minor, o.currency, o.correlation_id,
       o.created_at, o.updated_at, o.payment_declines, o.last_decline_code, o.last_declined_at,
       o.authorization_cancel_requested_at,
       h.id AS hold_id, h.status AS hold_status, h.created_at AS hold_created_at,
       h.expires_at AS hold_expires_at, h.payment_grace_at AS hold_payment_grace_at,
       (SELECT count(*) FROM hold_seats hs WHERE hs.hold_id = h.id)::int AS hold_seats
FROM orders o
JOIN events e ON e.id = o.event_id
LEFT JOIN holds h ON h.order_id = o.id
WHERE o.id = @order_id::uuid;

-- name: TimelineEvents :many
-- The order's events that outbox_history still keeps, oldest first.
SELECT event_id, event_type, occurred_at, causation_id, applied_by
FROM outbox_history
WHERE aggregate_id = @order_id::uuid
ORDER BY occurred_at, event_id;

-- name: TimelineInbox :many
-- Which consumer applied which of event_ids, and when. The consumers are
-- found by walking inbox_pkey from one consumer to the next (a descent per
-- consumer, not a scan), then each consumer's rows of event_ids by the
-- same key: LATERAL keeps that a lookup per consumer (a plain join lets
-- the planner hash the consumers and scan the whole inbox).
WITH RECURSIVE consumers AS (
    (SELECT i.consumer FROM inbox i ORDER BY i.consumer LIMIT 1)
    UNION ALL
    SELECT (SELECT i.consumer FROM inbox i WHERE i.consumer > c.consumer ORDER BY i.consumer LIMIT 1)
    FROM consumers c WHERE c.consumer IS NOT NULL
)
SELECT a.consumer, a.event_id, a.processed_at
FROM consumers c
CROSS JOIN LATERAL (
    SELECT i.consumer, i.event_id, i.processed_at FROM inbox i
    WHERE i.consumer = c.consumer AND i.event_id = ANY (@event_ids::uuid[])
) a
ORDER BY a.processed_at, a.consumer;

-- name: TimelinePayment :many
-- The order's payment at the provider (no row until its PaymentIntent
-- exists), without its client secret.
SELECT provider, payment_intent_id, status, amount_minor, currency, created_at, updated_at
FROM payments
WHERE order_id = @order_id::uuid;

-- name: TimelineProviderEvents :many
-- The provider's webhooks about the order: those recorded with it, and
-- those its events name as their cause (ids recorded before the order was).
SELECT s.id, s.type, s.received_at, s.duplicates, s.last_duplicate_at
FROM stripe_events s
WHERE s.order_id = @order_id::uuid
UNION
SELECT s.id, s.type, s.received_at, s.duplicates, s.last_duplicate_at
FROM stripe_events s
WHERE s.id = ANY (@ids::text[])
ORDER BY received_at, id;

-- name: TimelineTickets :many
-- The order's tickets (not their QR payloads) and their check-ins.
SELECT t.id, t.seat_id, t.issued_at, t.revoked_at, t.resale_at,
       c.gate AS check_in_gate, c.scanned_at AS check_in_scanned_at
FROM tickets t
LEFT JOIN check_ins c ON c.ticket_id = t.id
WHERE t.order_id = @order_id::uuid
ORDER BY t.issued_at, t.id;

-- name: TimelineRefunds :many
-- The order's refunds of selected tickets.
SELECT id, ticket_ids, amount_minor, resell, status, requested_at, succeeded_at
FROM refunds
WHERE order_id = @order_id::uuid
ORDER BY requested_at, id;

-- name: TimelineWebhookMessages :many
-- The organizer's webhook messages of the order: keyed by the event they
-- stand for (or by the order, for order.failed), found by the unique key
-- (organizer_id, source_key). Without their payload.
SELECT id, event_type, created_at
FROM webhook_messages
WHERE organizer_id = @organizer_id::uuid AND source_key = ANY (@source_keys::text[])
ORDER BY created_at, id;

-- name: TimelineWebhookDeliveries :many
-- The deliveries of messages to the organizer's endpoints, without their
-- last error's text.
SELECT id, message_id, endpoint_id, status, attempts, created_at, updated_at, acknowledged_at
FROM webhook_deliveries
WHERE message_id = ANY (@message_ids::uuid[])
ORDER BY created_at, id;

-- name: TimelineWebhookAttempts :many
-- The attempts of those deliveries: outcome only, never the response body.
SELECT delivery_id, message_id, endpoint_id, number, trigger, status_code, latency_ms, error_class, created_at
FROM webhook_attempts
WHERE message_id = ANY (@message_ids::uuid[])
ORDER BY created_at, id;
