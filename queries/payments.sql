-- name: PaymentGetByOrder :one
SELECT * FROM payments WHERE order_id = @order_id::uuid;

-- name: PaymentOrderByIntent :one
SELECT order_id FROM payments WHERE payment_intent_id = @payment_intent_id::text;

-- name: PaymentOrderByIntentForUser :one
-- The order whose payments row names the intent, if user_id owns it.
SELECT p.order_id
FROM payments p
JOIN orders o ON o.id = p.order_id
WHERE p.payment_intent_id = @payment_intent_id::text AND o.user_id = @user_id::uuid;

-- name: PaymentUpsertIntent :execrows
-- Records the PaymentIntent created for an order, with its client secret.
-- A row that already names another intent is left alone and 0 returned:
-- the order keeps its first intent.
INSERT INTO payments (order_id, provider, payment_intent_id, client_secret, status, amount_minor, currency)
VALUES (@order_id::uuid, @provider::text, @payment_intent_id::text, @client_secret::text,
        @status::text, @amount_minor::bigint, @currency::text)
ON CONFLICT (order_id) DO UPDATE
SET provider          = EXCLUDED.provider,
    payment_intent_id = EXCLUDED.payment_intent_id,
    client_secret     = EXCLUDED.client_secret,
    status            = EXCLUDED.status,
    amount_minor      = EXCLUDED.amount_minor,
    currency          = EXCLUDED.currency,
    updated_at        = now()
WHERE payments.payment_intent_id IS NULL OR payments.payment_intent_id = EXCLUDED.payment_intent_id;

-- name: PaymentSetStatus :execrows
-- Mirrors the provider's status of the order's intent. Returns 0 when the
-- order has no payment row for that intent.
UPDATE payments
SET status = @status::text, updated_at = now()
WHERE order_id = @order_id::uuid AND payment_intent_id = @payment_intent_id::text;

-- name: PaymentMirrorStatus :execrows
-- PaymentSetStatus for a writer outside the order's lock (the payment
-- commands, after a provider call): a row another transaction is writing
-- (the provider's webhook for the same intent, applied under the order's
-- lock) is skipped, not waited for, since that transaction records what
-- the provider says. Returns 0 when skipped, or when the order has no
-- row for that intent.
WITH free AS (
    SELECT order_id FROM payments
    WHERE order_id = @order_id::uuid AND payment_intent_id = @payment_intent_id::text
    FOR UPDATE SKIP LOCKED)
UPDATE payments p SET status = @status::text, updated_at = now()
FROM free WHERE p.order_id = free.order_id;

-- name: PaymentIntentGetByOrder :one
-- The order's PaymentIntent id and status, never its client secret.
SELECT payment_intent_id, status FROM payments WHERE order_id = @order_id::uuid;

-- name: PaymentRecordStatus :execrows
-- Records the provider's status of the order's intent while it is being
-- confirmed (requires_action, processing), unless the row moved on.
UPDATE payments SET status = @status::text, updated_at = now()
WHERE order_id = @order_id::uuid AND payment_intent_id = @payment_intent_id::text
  AND status IN ('requires_payment_method', 'requires_confirmation', 'requires_action', 'processing');
