-- name: PaymentGetByOrder :one
SELECT * FROM payments WHERE order_id = @order_id::uuid;
