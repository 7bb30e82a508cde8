-- The purchase saga's own bookkeeping (docs/saga.md).
--
-- An order's PaymentIntent must be canceled when the order is released
-- before capture, and several actors may notice that first: the expiry
-- worker, the saga on a late PaymentIntentCreated or PaymentAuthorized, a
-- failed payment. Whoever writes AuthorizationCancelRequested first stamps
-- the order in the same transaction, under the order's row lock, and the
-- others see the stamp and emit nothing: one cancel request per order (the
-- provider's cancel is idempotent on cancel:<order_id> anyway, but one
-- request is what operators and tests can count on).

-- +goose Up
ALTER TABLE orders ADD COLUMN authorization_cancel_requested_at timestamptz;

-- +goose Down
ALTER TABLE orders DROP COLUMN authorization_cancel_requested_at;
