-- One order's story (issue 29, item 2: `boxoffice timeline <orderId>` and
-- GET /v1/orders/{orderId}/timeline). docs/timeline.md says what the story
-- holds and what it costs a purchase.
--
-- outbox_history keeps, for every event written to the outbox, what the
-- relay's delete of the outbox row would lose: its id, order, type, when
-- it occurred, what caused it and which consumer its writer applied it for
-- (Envelope.AppliedBy). The inbox cannot tell the story alone: it holds an
-- event only once a consumer applied it, and HoldCreated has no consumer,
-- the provider's facts are applied by the ingress (no inbox row), and the
-- webhook fan-out records no row for an event no endpoint subscribes to.
-- The row is written by the statement that writes the outbox row
-- (OutboxInsert, hold_reserve): no round trip of its own. Retention
-- (ops/retention) deletes rows as old as the inbox's, by occurred_at.
--
-- stripe_events gains the order a provider webhook concerned (written by
-- the statement that records the webhook), and a count of the deliveries
-- of the same event id that were ignored as duplicates, with the last one's
-- time (one UPDATE on the duplicate's path only).
--
-- Columns with no default or a constant one are added without rewriting
-- the table.

-- +goose Up
CREATE TABLE outbox_history (
    aggregate_id uuid NOT NULL,
    event_id     uuid NOT NULL,
    event_type   text NOT NULL,
    occurred_at  timestamptz NOT NULL,
    causation_id text,
    applied_by   text,
    PRIMARY KEY (aggregate_id, event_id)
);
CREATE INDEX outbox_history_occurred_brin ON outbox_history USING brin (occurred_at);
CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON outbox_history
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();

ALTER TABLE stripe_events
    ADD COLUMN order_id uuid,
    ADD COLUMN duplicates integer NOT NULL DEFAULT 0,
    ADD COLUMN last_duplicate_at timestamptz;
CREATE INDEX stripe_events_order_idx ON stripe_events (order_id) WHERE order_id IS NOT NULL;

-- +goose Down
DROP INDEX stripe_events_order_idx;
ALTER TABLE stripe_events DROP COLUMN last_duplicate_at, DROP COLUMN duplicates, DROP COLUMN order_id;
DROP TABLE outbox_history;
