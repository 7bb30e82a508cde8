-- name: IdempotencyKeyGet :one
SELECT request_hash, order_id, response
FROM idempotency_keys
WHERE user_id = @user_id::uuid AND key = @key::text;
