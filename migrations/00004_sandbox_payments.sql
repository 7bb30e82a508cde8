-- +goose Up
-- The sandbox payment provider (payments.Sandbox) keeps its state here so
-- that every process of a dev or test deployment (API, workers) sees the
-- same PaymentIntents, as they would all see Stripe's. Production, which
-- talks to Stripe, never writes these tables.

-- One row per PaymentIntent, shaped like Stripe's object. Amounts are in
-- the currency's minor unit.
CREATE TABLE sandbox_payment_intents (
    id                 text PRIMARY KEY,
    -- Sensitive, like Stripe's: handed to the buyer's browser only; never
    -- logged, published or put in a URL.
    client_secret      text NOT NULL,
    amount             bigint NOT NULL CHECK (amount > 0),
    currency           text NOT NULL,
    status             text NOT NULL,
    amount_capturable  bigint NOT NULL DEFAULT 0,
    amount_received    bigint NOT NULL DEFAULT 0,
    metadata           jsonb NOT NULL DEFAULT '{}',
    -- The charge an authorization created (ch_…); refunds are of it.
    latest_charge      text,
    -- Stripe's last_payment_error object after a decline; null otherwise.
    last_payment_error jsonb,
    canceled_at        timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sandbox_payment_intents_created_idx ON sandbox_payment_intents (created_at);

-- At most one (full) refund per PaymentIntent.
CREATE TABLE sandbox_refunds (
    id                text PRIMARY KEY,
    payment_intent_id text NOT NULL UNIQUE REFERENCES sandbox_payment_intents (id),
    amount            bigint NOT NULL,
    currency          text NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now()
);

-- Stripe's idempotency layer: the first request with a key claims the row,
-- performs the operation and stores its response (success or error) in the
-- same transaction; later requests with the key replay the response. A
-- concurrent request with the key waits on the uncommitted row, then
-- replays. response is null only inside the claiming transaction.
CREATE TABLE sandbox_idempotency_keys (
    key          text PRIMARY KEY,
    operation    text NOT NULL,
    request_hash bytea NOT NULL,
    response     jsonb,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- Every request the sandbox answered, and whether it performed the
-- operation, replayed a stored response or refused: what a test asserts
-- when it needs "one capture at the provider".
CREATE TABLE sandbox_requests (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operation         text NOT NULL,
    payment_intent_id text,
    idempotency_key   text,
    outcome           text NOT NULL CHECK (outcome IN ('performed', 'replayed', 'rejected')),
    created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sandbox_requests_intent_idx ON sandbox_requests (payment_intent_id, operation);

-- The webhook events the sandbox owes the application, written in the
-- transaction of the change they describe and drained by
-- Sandbox.RunWebhookSender until the receiver answers 2xx. payload is the
-- event's JSON, fixed once, so every attempt sends the same bytes.
CREATE TABLE sandbox_webhook_deliveries (
    event_id          text PRIMARY KEY,
    seq               bigint GENERATED ALWAYS AS IDENTITY,
    event_type        text NOT NULL,
    payment_intent_id text NOT NULL,
    payload           json NOT NULL,
    attempts          int NOT NULL DEFAULT 0,
    next_attempt_at   timestamptz NOT NULL DEFAULT now(),
    last_attempt_at   timestamptz,
    -- Why the last attempt failed: a status code or an error class, never
    -- a response body.
    last_error        text,
    delivered_at      timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sandbox_webhook_deliveries_due_idx ON sandbox_webhook_deliveries (next_attempt_at)
    WHERE delivered_at IS NULL;

-- +goose Down
DROP TABLE sandbox_webhook_deliveries, sandbox_requests, sandbox_idempotency_keys,
    sandbox_refunds, sandbox_payment_intents;
