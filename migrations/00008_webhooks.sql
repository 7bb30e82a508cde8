-- Outbound webhooks for organizers (docs/design/webhooks.md). A public fact becomes one immutable webhook_messages row and
-- one webhook_deliveries row per subscribed endpoint, written with the
-- fan-out consumer's inbox row; the dispatcher claims due deliveries, POSTs
-- them and records one webhook_attempts row per try.

-- +goose Up

-- An organizer's subscription. secret signs every delivery; during a
-- rotation previous_secret signs beside it until previous_secret_expires_at.
-- Both are sensitive: shown once (at creation and rotation), never returned
-- by a read, never logged. The circuit breaker and failure tracking are
-- written by the dispatcher only.
CREATE TABLE webhook_endpoints (
    id                         uuid PRIMARY KEY,
    organizer_id               uuid NOT NULL,
    url                        text NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    description                text NOT NULL DEFAULT '' CHECK (length(description) <= 500),
    -- Public event types delivered; empty means every type.
    event_types                text[] NOT NULL DEFAULT '{}',
    enabled                    boolean NOT NULL DEFAULT true,
    -- Why the endpoint is disabled: 'user', 'gone' (the receiver answered
    -- 410) or 'failing' (it failed consistently for days).
    disabled_reason            text CHECK (disabled_reason IN ('user', 'gone', 'failing')),
    -- Deliveries per second; NULL is unlimited.
    rate_limit_per_second      integer CHECK (rate_limit_per_second > 0),
    max_concurrency            integer NOT NULL DEFAULT 10 CHECK (max_concurrency BETWEEN 1 AND 1000),
    secret                     text NOT NULL,
    previous_secret            text,
    previous_secret_expires_at timestamptz,
    circuit_state              text NOT NULL DEFAULT 'closed' CHECK (circuit_state IN ('closed', 'open')),
    -- While the circuit is open nothing is sent before circuit_open_until;
    -- after it one probe at a time is (half-open).
    circuit_open_until         timestamptz,
    circuit_opened_count       integer NOT NULL DEFAULT 0,
    consecutive_failures       integer NOT NULL DEFAULT 0,
    -- The first failure since the last success; NULL while healthy.
    failing_since              timestamptz,
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_endpoint_organizer_idx ON webhook_endpoints (organizer_id, created_at, id);

-- One public fact for one organizer. payload holds the exact bytes every
-- attempt sends and signs, fixed once. source_key is what the fact came
-- from (the event id, or order.failed:<order id>): UNIQUE per organizer, so
-- a redelivered or repeated fact makes no second message.
CREATE TABLE webhook_messages (
    id           uuid PRIMARY KEY,
    organizer_id uuid NOT NULL,
    event_type   text NOT NULL,
    payload      bytea NOT NULL,
    source_key   text NOT NULL,
    order_id     uuid,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (organizer_id, source_key)
);
CREATE INDEX webhook_message_list_idx ON webhook_messages (organizer_id, created_at DESC, id DESC);
CREATE INDEX webhook_message_created_idx ON webhook_messages (created_at);

-- A message owed to one endpoint. status: pending (due at
-- next_attempt_at; while claimed_by and lease_expires_at are set a
-- dispatcher holds it, and when the lease runs out without an outcome it
-- is due again), succeeded, failed (stopped
-- because its endpoint was disabled; kept for recover and replay) or dead
-- (a terminal answer, or retries exhausted). next_trigger is the trigger
-- the next attempt records; retry_base is the attempt count at the last
-- replay or recover, so the retry schedule restarts there.
CREATE TABLE webhook_deliveries (
    id              uuid PRIMARY KEY,
    message_id      uuid NOT NULL REFERENCES webhook_messages (id) ON DELETE CASCADE,
    endpoint_id     uuid NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    organizer_id    uuid NOT NULL,
    status          text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'succeeded', 'failed', 'dead')),
    attempts        integer NOT NULL DEFAULT 0,
    retry_base      integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    next_trigger    text NOT NULL DEFAULT 'original' CHECK (next_trigger IN ('original', 'retry', 'replay')),
    claimed_by      text,
    -- Not indexed, so that a claim is a HOT update that writes no index.
    lease_expires_at timestamptz,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (message_id, endpoint_id)
) WITH (fillfactor = 70); -- room on each page for the claim's HOT update
-- The dispatcher's per-tenant queues: due deliveries of one organizer.
CREATE INDEX webhook_delivery_due_idx ON webhook_deliveries (organizer_id, next_attempt_at) WHERE status = 'pending';
-- Recover and disabling look for an endpoint's unfinished deliveries;
-- succeeded ones, the bulk, stay out of this index.
CREATE INDEX webhook_delivery_endpoint_idx ON webhook_deliveries (endpoint_id, status) WHERE status <> 'succeeded';
-- The oldest pending delivery, for the backlog-age gauge.
CREATE INDEX webhook_delivery_pending_created_idx ON webhook_deliveries (created_at) WHERE status = 'pending';

-- One try of one delivery. status_code is NULL when no answer came;
-- response_body holds at most the first KiB of the answer. Attempts are
-- deleted with their message (WebhookMessagePrune); they outlive a deleted
-- endpoint's deliveries as history until then. No foreign key and two
-- indexes only: the dispatcher writes an attempt per delivery, and a
-- foreign key check would lock (write) the message row each time.
CREATE TABLE webhook_attempts (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id   uuid NOT NULL,
    message_id    uuid NOT NULL,
    endpoint_id   uuid NOT NULL,
    organizer_id  uuid NOT NULL,
    number        integer NOT NULL,
    trigger       text NOT NULL CHECK (trigger IN ('original', 'retry', 'replay')),
    status_code   integer,
    latency_ms    integer NOT NULL,
    error_class   text NOT NULL,
    response_body text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_attempt_message_idx ON webhook_attempts (message_id, id);

-- +goose Down
DROP TABLE webhook_attempts, webhook_deliveries, webhook_messages, webhook_endpoints;
