-- Hold lifetime per event and a grace for payments being confirmed (issue
-- 17). onsales.hold_ttl_seconds is the organizer's hold lifetime for the
-- event, within bounds (NULL: the deployment's BOXOFFICE_HOLD_TTL).
-- holds.payment_grace_at is set when the hold was extended because its
-- PaymentIntent was being confirmed (3-D Secure, or an asynchronous
-- method): once per hold, by at most the deployment's grace, so that an
-- authorization in flight is not reclaimed under the buyer — and so that
-- it cannot be used to keep seats.

-- +goose Up
ALTER TABLE onsales
    ADD COLUMN hold_ttl_seconds integer CHECK (hold_ttl_seconds IS NULL OR hold_ttl_seconds BETWEEN 60 AND 1800);
ALTER TABLE holds ADD COLUMN payment_grace_at timestamptz;

-- +goose Down
ALTER TABLE holds DROP COLUMN payment_grace_at;
ALTER TABLE onsales DROP COLUMN hold_ttl_seconds;
