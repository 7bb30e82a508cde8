-- Partial refunds (issue 17): an organizer refunds selected tickets of a
-- ticketed order. Each such refund is a row here, written in the
-- transaction that revokes its tickets, and sent to the provider with its
-- own idempotency key ("refund:<refund id>") and amount. A whole-order
-- refund is not a row: the order's status (refunding, refunded) says it,
-- and it refunds whatever the partial refunds left.
--
-- cumulative_minor is what the charge has had refunded once this refund
-- went through (every earlier refund of the order plus this one): the
-- provider reports the charge's refunded total, and a refund is confirmed
-- when that total reaches its cumulative_minor, whichever webhook says so
-- first and in whatever order they arrive.

-- The sandbox, like Stripe, now refunds a charge in several parts.

-- +goose Up
ALTER TABLE sandbox_refunds DROP CONSTRAINT sandbox_refunds_payment_intent_id_key;
CREATE INDEX sandbox_refund_intent_idx ON sandbox_refunds (payment_intent_id);

CREATE TABLE refunds (
    id               uuid PRIMARY KEY,
    order_id         uuid NOT NULL REFERENCES orders (id),
    ticket_ids       uuid[] NOT NULL CHECK (cardinality(ticket_ids) > 0),
    amount_minor     bigint NOT NULL CHECK (amount_minor > 0),
    cumulative_minor bigint NOT NULL CHECK (cumulative_minor >= amount_minor),
    resell           boolean NOT NULL,
    status           text NOT NULL DEFAULT 'requested' CHECK (status IN ('requested', 'succeeded')),
    requested_at     timestamptz NOT NULL DEFAULT now(),
    succeeded_at     timestamptz,
    UNIQUE (order_id, cumulative_minor)
);
-- Written by the purchase cell's writers only: fenced like every table
-- they write (00010_region_fence.sql).
CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON refunds
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();

-- +goose Down
DROP TABLE refunds;
DROP INDEX sandbox_refund_intent_idx;
ALTER TABLE sandbox_refunds ADD CONSTRAINT sandbox_refunds_payment_intent_id_key UNIQUE (payment_intent_id);
