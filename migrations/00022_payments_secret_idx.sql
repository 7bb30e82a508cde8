-- The retention worker clears the client secrets of orders no longer
-- awaiting payment every minute; this partial index holds only the rows
-- that still have one (few: the orders awaiting payment), so the pass does
-- not read the whole payments table.

-- +goose Up
CREATE INDEX payments_client_secret_idx ON payments (order_id) WHERE client_secret IS NOT NULL;

-- +goose Down
DROP INDEX payments_client_secret_idx;
