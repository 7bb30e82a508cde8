-- A declined card no longer fails the order (issue 17): the buyer tries
-- again on the same PaymentIntent, which Stripe returns to
-- requires_payment_method, while the hold keeps the seats. The order
-- counts its declines and keeps the last one for the buyer to see; the
-- event's onsale settings say how many attempts a buyer has
-- (payment_attempts, NULL: purchase.DefaultPaymentAttempts). The decline
-- that uses up the last attempt fails the order as before.

-- +goose Up
ALTER TABLE orders
    ADD COLUMN payment_declines integer NOT NULL DEFAULT 0,
    ADD COLUMN last_decline_code text,
    ADD COLUMN last_declined_at timestamptz;
ALTER TABLE onsales
    ADD COLUMN payment_attempts integer CHECK (payment_attempts IS NULL OR payment_attempts BETWEEN 1 AND 10);

-- +goose Down
ALTER TABLE onsales DROP COLUMN payment_attempts;
ALTER TABLE orders DROP COLUMN last_declined_at, DROP COLUMN last_decline_code, DROP COLUMN payment_declines;
