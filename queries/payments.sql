-- name: PaymentGetByOrder :one
SELECT * FROM payments WHERE order_id = @order_id::uuid;

-- name: PaymentOrderByIntent :one
SELECT order_id FROM payments WHERE payment_intent_id = @payment_intent_id::text;
