-- +goose Up
-- The buyer journey's correlation id of the fact a message tells, so the
-- dispatcher's lines about an order carry it like every other line about
-- an order (docs/design/signals.md).
ALTER TABLE webhook_messages ADD COLUMN correlation_id text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE webhook_messages DROP COLUMN correlation_id;
