-- +goose Up
-- Repairs boxoffice reconcile made: one row per PaymentIntent and kind of
-- repair, written in the transaction that emits the repairing event, so a
-- second run (or two operators at once) never repairs the same mismatch
-- twice, and the operator can see what reconciliation did.
CREATE TABLE reconcile_repairs (
    payment_intent_id text NOT NULL,
    repair            text NOT NULL,
    order_id          uuid NOT NULL,
    event_id          uuid NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (payment_intent_id, repair)
);
CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON reconcile_repairs
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();

-- +goose Down
DROP TABLE reconcile_repairs;
