-- name: IdempotencyKeyGet :one
-- The stored answer of a hold under the user's key, with the status its
-- order has now (the stored answer says pending_payment, as it was).
SELECT k.request_hash, k.order_id, k.response, o.status AS order_status
FROM idempotency_keys k
JOIN orders o ON o.id = k.order_id
WHERE k.user_id = @user_id::uuid AND k.key = @key::text;
