-- name: OrderLockForOwner :one
-- Locks the order if user_id owns it; anyone else gets no rows.
SELECT * FROM orders WHERE id = @id::uuid AND user_id = @user_id::uuid FOR UPDATE;

-- name: OrderLockForOrganizer :one
-- Locks the order if organizer_id organizes its event; anyone else gets no
-- rows.
SELECT o.*
FROM orders o
JOIN events e ON e.id = o.event_id
WHERE o.id = @id::uuid AND e.organizer_id = @organizer_id::uuid
FOR UPDATE OF o;

-- name: OrderStatusGetForUser :one
-- The order's status for its owner only, and its PaymentIntent once there
-- is one, read by the order event stream.
SELECT o.id, o.event_id, o.status, o.updated_at,
       coalesce((SELECT p.payment_intent_id FROM payments p WHERE p.order_id = o.id), '')::text AS payment_intent_id
FROM orders o WHERE o.id = @id::uuid AND o.user_id = @user_id::uuid;

-- name: OrderGetForUpdate :one
-- Locks the order row for the rest of the transaction: every saga step and
-- every other writer of an order's state takes this lock first (then the
-- hold's, then the seats'), so they serialize and cannot deadlock.
SELECT * FROM orders WHERE id = @id::uuid FOR UPDATE;

-- name: OrderTransition :exec
-- Moves the order from from_status to to_status, bumping version and
-- updated_at. An order not in from_status fails the statement
-- (expect_rows): its callers hold the order's lock, so that is a bug, and
-- a deferred move (db.Deferring) must stop the commit it goes with.
WITH moved AS (
    UPDATE orders
    SET status = @to_status::text, version = version + 1, updated_at = now()
    WHERE id = @id::uuid AND status = @from_status::text
    RETURNING 1)
SELECT expect_rows((SELECT count(*) FROM moved), 1, 'order changed under its lock');

-- name: OrderMarkAuthorizationCancelRequested :execrows
-- Stamps that AuthorizationCancelRequested was written for the order.
-- Returns 0 when it already was: the caller must then not write another.
UPDATE orders
SET authorization_cancel_requested_at = now(), updated_at = now()
WHERE id = @id::uuid AND authorization_cancel_requested_at IS NULL;

-- name: OrderTransitionMany :many
-- Moves those of the given (locked) orders that are in from_status to
-- to_status, as OrderTransition does one: the expiry worker's order step.
-- Returns the ids it moved.
UPDATE orders
SET status = @to_status::text, version = version + 1, updated_at = now()
WHERE id = ANY(@ids::uuid[]) AND status = @from_status::text
RETURNING id;

-- name: OrderMarkAuthorizationCancelRequestedWithIntent :many
-- The expiry worker's cancel step: stamps each given order that has a
-- PaymentIntent and no cancel request yet, and returns it with its intent
-- id; the caller writes one AuthorizationCancelRequested per row.
UPDATE orders AS o
SET authorization_cancel_requested_at = now(), updated_at = now()
FROM payments AS p
WHERE o.id = ANY(@ids::uuid[])
  AND p.order_id = o.id
  AND p.payment_intent_id IS NOT NULL
  AND o.authorization_cancel_requested_at IS NULL
RETURNING o.id, p.payment_intent_id::text AS payment_intent_id;

-- name: OrderStatusGet :one
-- The order's status and its journey's correlation id, unlocked: what the
-- payment ingress compares a provider event with, in the transaction that
-- records the event, before deciding whether to re-read the intent.
SELECT status, correlation_id FROM orders WHERE id = @id::uuid;

-- name: OrderGetForUser :many
-- The buyer's order with this id (order_details: its hold, seats,
-- payment, tickets and refunds), or no row when it is not theirs. By key
-- only, so one generic plan per session serves every call.
SELECT * FROM order_details WHERE id = @id::uuid AND user_id = @user_id::uuid;

-- name: OrderListForUser :many
-- A buyer's orders (order_details), newest first: of one event when
-- event_id is given, in one of statuses when it is not empty, and before
-- the cursor (before_created_at, before_id) when given. order_user_idx
-- serves it. A page of orders, each with its seats, payment, tickets and
-- refunds, is one round trip.
SELECT * FROM order_details o
WHERE o.user_id = @user_id::uuid
  AND (sqlc.narg(event_id)::uuid IS NULL OR o.event_id = sqlc.narg(event_id)::uuid)
  AND (cardinality(@statuses::text[]) = 0 OR o.status = ANY(@statuses::text[]))
  AND (sqlc.narg(before_created_at)::timestamptz IS NULL
       OR (o.created_at, o.id) < (sqlc.narg(before_created_at)::timestamptz, sqlc.narg(before_id)::uuid))
ORDER BY o.created_at DESC, o.id DESC
LIMIT @max_rows::int;

-- name: OrderListByEvent :many
-- An event's orders for its organizer, newest first: of one buyer when
-- user_id is given, in one of statuses when it is not empty, before the
-- cursor when given. order_event_idx serves it.
SELECT o.id, o.user_id, o.status, o.amount_minor, o.currency, o.created_at, o.updated_at,
       (SELECT count(*) FROM hold_seats hs JOIN holds h ON h.id = hs.hold_id WHERE h.order_id = o.id)::int AS seat_count,
       o.channel, o.external_reference
FROM orders o
WHERE o.event_id = @event_id::uuid
  AND (sqlc.narg(user_id)::uuid IS NULL OR o.user_id = sqlc.narg(user_id)::uuid)
  AND (cardinality(@statuses::text[]) = 0 OR o.status = ANY(@statuses::text[]))
  AND (sqlc.narg(before_created_at)::timestamptz IS NULL
       OR (o.created_at, o.id) < (sqlc.narg(before_created_at)::timestamptz, sqlc.narg(before_id)::uuid))
ORDER BY o.created_at DESC, o.id DESC
LIMIT @max_rows::int;

-- name: EventSales :one
-- The event's sales in one statement, so at one snapshot. Each seat is
-- counted once, by what it is now: sold (a ticket that is not revoked),
-- else held (an unreleased hold row whose hold is confirmed, or active and
-- not past its expiry), else refunded (its ticket revoked by a refund
-- that kept it off sale), else available (a seat released for resale
-- included). Money is the orders': gross is the amount of orders in
-- captured_statuses (money taken), refunded of those in refunded_status
-- plus the confirmed partial refunds of the others. by_category breaks the
-- seats down by price category (00035), in the organizer's order. A seat
-- the organizer blocked (00036) is blocked; orders_by_channel counts the
-- orders by channel, and box_office_minor is the part of gross paid
-- outside the provider.
WITH ev_orders AS (
    SELECT id, status, amount_minor, channel FROM orders WHERE event_id = @event_id::uuid
), ticketed AS (
    SELECT t.seat_id, bool_or(t.revoked_at IS NULL) AS live,
           bool_or(t.revoked_at IS NOT NULL AND t.resale_at IS NULL) AS off_sale
    FROM tickets t JOIN ev_orders o ON o.id = t.order_id
    GROUP BY t.seat_id
), held AS (
    SELECT DISTINCT hs.seat_id
    FROM ev_orders o
    JOIN holds h ON h.order_id = o.id
    JOIN hold_seats hs ON hs.hold_id = h.id AND hs.released_at IS NULL
    WHERE h.status = 'confirmed' OR (h.status = 'active' AND h.expires_at > now())
), seat_state AS (
    SELECT s.category_id,
           CASE
               WHEN t.live THEN 'sold'
               WHEN hd.seat_id IS NOT NULL THEN 'held'
               WHEN bl.seat_id IS NOT NULL THEN 'blocked'
               WHEN t.off_sale THEN 'refunded'
               ELSE 'available'
           END AS state
    FROM seats s
    LEFT JOIN ticketed t ON t.seat_id = s.id
    LEFT JOIN held hd ON hd.seat_id = s.id
    LEFT JOIN seat_blocks bl ON bl.seat_id = s.id
    WHERE s.event_id = @event_id::uuid
)
SELECT
    (SELECT count(*) FROM seat_state)::int AS seats_total,
    (SELECT count(*) FROM seat_state WHERE state = 'available')::int AS seats_available,
    (SELECT count(*) FROM seat_state WHERE state = 'held')::int AS seats_held,
    (SELECT count(*) FROM seat_state WHERE state = 'sold')::int AS seats_sold,
    (SELECT count(*) FROM seat_state WHERE state = 'refunded')::int AS seats_refunded,
    (SELECT count(*) FROM seat_state WHERE state = 'blocked')::int AS seats_blocked,
    COALESCE((SELECT jsonb_object_agg(channel, n) FROM (SELECT channel, count(*) AS n FROM ev_orders GROUP BY channel) x), '{}')::jsonb AS orders_by_channel,
    COALESCE((SELECT sum(amount_minor) FROM ev_orders WHERE channel = 'box_office' AND status = ANY(@captured_statuses::text[])), 0)::bigint AS box_office_minor,
    (SELECT count(*) FROM check_ins c WHERE c.event_id = @event_id::uuid)::int AS checked_in,
    COALESCE((SELECT jsonb_object_agg(status, n) FROM (SELECT status, count(*) AS n FROM ev_orders GROUP BY status) x), '{}')::jsonb AS orders_by_status,
    COALESCE((SELECT jsonb_agg(jsonb_build_object(
                  'id', c.id, 'name', c.name, 'price_minor', c.price_minor,
                  'total', coalesce(n.total, 0), 'available', coalesce(n.available, 0),
                  'held', coalesce(n.held, 0), 'sold', coalesce(n.sold, 0), 'refunded', coalesce(n.refunded, 0),
                  'blocked', coalesce(n.blocked, 0))
                  ORDER BY c.position)
              FROM price_categories c
              LEFT JOIN (SELECT category_id, count(*) AS total,
                                count(*) FILTER (WHERE state = 'available') AS available,
                                count(*) FILTER (WHERE state = 'held') AS held,
                                count(*) FILTER (WHERE state = 'sold') AS sold,
                                count(*) FILTER (WHERE state = 'refunded') AS refunded,
                                count(*) FILTER (WHERE state = 'blocked') AS blocked
                         FROM seat_state GROUP BY category_id) n ON n.category_id = c.id
              WHERE c.event_id = @event_id::uuid), '[]')::jsonb AS by_category,
    COALESCE((SELECT sum(amount_minor) FROM ev_orders WHERE status = ANY(@captured_statuses::text[])), 0)::bigint AS gross_minor,
    (COALESCE((SELECT sum(amount_minor) FROM ev_orders WHERE status = @refunded_status::text), 0)
     + COALESCE((SELECT sum(r.amount_minor) FROM refunds r JOIN ev_orders o ON o.id = r.order_id
                 WHERE o.status <> @refunded_status::text AND r.status = 'succeeded'), 0))::bigint AS refunded_minor;

-- name: OrderRecordDecline :one
-- Counts a declined payment attempt of the (locked) order and keeps its
-- code; returns the declines so far and the attempts the event allows
-- (0: the default).
UPDATE orders o
SET payment_declines = payment_declines + 1, last_decline_code = @code::text, last_declined_at = now(),
    version = version + 1, updated_at = now()
WHERE o.id = @id::uuid
RETURNING o.payment_declines,
          coalesce((SELECT os.payment_attempts FROM onsales os WHERE os.event_id = o.event_id), 0)::int AS payment_attempts;

-- name: OrderHoldGetForUpdate :one
-- Locks the order and its hold in one statement, as OrderGetForUpdate and
-- then HoldGetByOrderForUpdate lock them in two, and lists the hold's
-- seats as it was made (HoldSeatListByHold). No row when either is
-- missing.
SELECT sqlc.embed(o), sqlc.embed(h),
       ARRAY(SELECT hs.seat_id FROM hold_seats hs WHERE hs.hold_id = h.id ORDER BY hs.seat_id)::uuid[] AS seat_ids
FROM orders o JOIN holds h ON h.order_id = o.id
WHERE o.id = @id::uuid
FOR UPDATE OF o, h;

-- name: OrderTraceParent :one
-- The W3C traceparent of the order's hold request, "" when it was made
-- with tracing off: the span that applies a provider's webhook continues
-- the order's trace from it (read only when tracing is on).
SELECT coalesce(trace_parent, '')::text FROM orders WHERE id = @id::uuid;

-- name: OrderInsertIssued :exec
-- An order the organizer issues (channel comp or box_office), paid from
-- the start: its money, if any, was taken outside the payment provider.
INSERT INTO orders (id, user_id, event_id, status, amount_minor, currency, correlation_id, channel, external_reference)
VALUES (@id::uuid, @user_id::uuid, @event_id::uuid, 'paid', @amount_minor::bigint, @currency::text,
        @correlation_id::text, @channel::text, sqlc.narg(external_reference)::text);
