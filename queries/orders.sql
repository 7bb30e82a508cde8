-- name: OrderGetForUser :one
-- Returns the order only to its owner; anyone else gets no rows.
SELECT o.*, h.id AS hold_id, h.status AS hold_status, h.expires_at AS hold_expires_at
FROM orders o
JOIN holds h ON h.order_id = o.id
WHERE o.id = @id::uuid AND o.user_id = @user_id::uuid;

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

-- name: OrderTransition :execrows
-- Moves the order from from_status to to_status, bumping version and
-- updated_at. Returns 0 when the order is not in from_status.
UPDATE orders
SET status = @to_status::text, version = version + 1, updated_at = now()
WHERE id = @id::uuid AND status = @from_status::text;

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
