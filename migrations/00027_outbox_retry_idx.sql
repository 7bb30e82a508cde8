-- +goose Up
-- The release controller counts the outbox rows waiting out a retry after
-- a failed publish (the relay's publish errors) twice a second; the
-- partial index keeps that reading at the size of the retrying rows
-- instead of the backlog's.
CREATE INDEX outbox_retry_idx ON outbox (retry_at) WHERE retry_at IS NOT NULL;

-- +goose Down
DROP INDEX outbox_retry_idx;
