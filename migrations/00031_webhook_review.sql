-- Webhook deliveries that need review, and who asked for a redelivery
-- (issue 27, item 8).
--
-- needs_review: a delivery whose endpoint gave a terminal answer (a
-- redirect, a 4xx other than 408, 410 and 429, a 501 or a 505) is no
-- longer dead at once: it waits in needs_review for the organizer (or an
-- operator acting for them) to fix the receiver and recover or replay it.
-- Dead is left for what no retry can fix or what was retried enough
-- (retries exhausted, 410, a refused address, an oversized payload).
--
-- recover: the trigger of an attempt queued by recover, told apart from a
-- replay of one message (replay).
--
-- webhook_redeliveries: every replay and recover, with who asked
-- (requested_by: "user:<id>" or "api_key:<id>"), why (reason, free text
-- from the request) and what it covered (the message, or the endpoint and
-- the window since..until), and how many deliveries it queued; written in
-- the statement that queues them. Kept for the webhook retention window
-- (WebhookMessagePrune).
--
-- The CHECK constraints are replaced NOT VALID, then validated: validating
-- takes a lock that lets the dispatcher keep writing.

-- +goose Up
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_status_check,
    ADD CONSTRAINT webhook_deliveries_status_check
        CHECK (status IN ('pending', 'succeeded', 'failed', 'dead', 'needs_review')) NOT VALID;
ALTER TABLE webhook_deliveries VALIDATE CONSTRAINT webhook_deliveries_status_check;
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_next_trigger_check,
    ADD CONSTRAINT webhook_deliveries_next_trigger_check
        CHECK (next_trigger IN ('original', 'retry', 'replay', 'recover')) NOT VALID;
ALTER TABLE webhook_deliveries VALIDATE CONSTRAINT webhook_deliveries_next_trigger_check;
ALTER TABLE webhook_attempts DROP CONSTRAINT webhook_attempts_trigger_check,
    ADD CONSTRAINT webhook_attempts_trigger_check
        CHECK (trigger IN ('original', 'retry', 'replay', 'recover')) NOT VALID;
ALTER TABLE webhook_attempts VALIDATE CONSTRAINT webhook_attempts_trigger_check;
-- The gauge of deliveries waiting for review counts these.
CREATE INDEX webhook_delivery_review_idx ON webhook_deliveries (created_at) WHERE status = 'needs_review';

CREATE TABLE webhook_redeliveries (
    id           uuid PRIMARY KEY,
    organizer_id uuid NOT NULL,
    kind         text NOT NULL CHECK (kind IN ('replay', 'recover')),
    message_id   uuid,
    endpoint_id  uuid,
    since        timestamptz,
    until        timestamptz,
    requested_by text NOT NULL CHECK (length(requested_by) BETWEEN 1 AND 200),
    reason       text NOT NULL DEFAULT '' CHECK (length(reason) <= 500),
    deliveries   bigint NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_redelivery_organizer_idx ON webhook_redeliveries (organizer_id, created_at DESC);
CREATE INDEX webhook_redelivery_created_idx ON webhook_redeliveries (created_at);
-- A region that was failed over writes no record either (docs/failover.md).
CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON webhook_redeliveries
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();

-- +goose Down
DROP TABLE webhook_redeliveries;
DROP INDEX webhook_delivery_review_idx;
UPDATE webhook_deliveries SET status = 'dead' WHERE status = 'needs_review';
UPDATE webhook_deliveries SET next_trigger = 'replay' WHERE next_trigger = 'recover';
UPDATE webhook_attempts SET trigger = 'replay' WHERE trigger = 'recover';
ALTER TABLE webhook_attempts DROP CONSTRAINT webhook_attempts_trigger_check,
    ADD CONSTRAINT webhook_attempts_trigger_check CHECK (trigger IN ('original', 'retry', 'replay'));
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_next_trigger_check,
    ADD CONSTRAINT webhook_deliveries_next_trigger_check CHECK (next_trigger IN ('original', 'retry', 'replay'));
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_status_check,
    ADD CONSTRAINT webhook_deliveries_status_check CHECK (status IN ('pending', 'succeeded', 'failed', 'dead'));
