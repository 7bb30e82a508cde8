-- Bounded tables (issue 18): the retention worker (`work`, component
-- retention) deletes inbox rows and Stripe event ids older than their
-- retention and idempotency keys past their expires_at, in small batches.
-- BRIN indexes find the old rows cheaply; the tables are append-mostly in
-- time order, so a BRIN entry costs the hot paths next to nothing.

-- +goose Up
CREATE INDEX inbox_processed_brin ON inbox USING brin (processed_at);
CREATE INDEX stripe_events_received_brin ON stripe_events USING brin (received_at);
CREATE INDEX idempotency_keys_expires_brin ON idempotency_keys USING brin (expires_at);

-- +goose Down
DROP INDEX idempotency_keys_expires_brin;
DROP INDEX stripe_events_received_brin;
DROP INDEX inbox_processed_brin;
