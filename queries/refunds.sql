-- name: RefundInsert :one
-- Records a refund of selected tickets of the (locked) order, after every
-- earlier one.
INSERT INTO refunds (id, order_id, ticket_ids, amount_minor, cumulative_minor, resell)
SELECT @id::uuid, @order_id::uuid, @ticket_ids::uuid[], @amount_minor::bigint,
       COALESCE((SELECT sum(r.amount_minor) FROM refunds r WHERE r.order_id = @order_id::uuid), 0) + @amount_minor::bigint,
       @resell::bool
RETURNING *;

-- name: RefundConfirmUpTo :execrows
-- Confirms the order's refunds that the charge's refunded total covers.
UPDATE refunds SET status = 'succeeded', succeeded_at = now()
WHERE order_id = @order_id::uuid AND status = 'requested' AND cumulative_minor <= @amount_refunded::bigint;
