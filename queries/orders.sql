-- name: OrderGetForUser :one
-- Returns the order only to its owner; anyone else gets no rows.
SELECT o.*, h.id AS hold_id, h.status AS hold_status, h.expires_at AS hold_expires_at
FROM orders o
JOIN holds h ON h.order_id = o.id
WHERE o.id = @id::uuid AND o.user_id = @user_id::uuid;

-- name: OrderCorrelation :one
SELECT correlation_id FROM orders WHERE id = @id::uuid;
