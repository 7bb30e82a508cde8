-- The ticketing data model (docs/design/holds.md). PostgreSQL is the inventory ledger:
-- an active hold_seats row is temporary ownership of a seat, a tickets row is
-- final ownership, and two unique indexes are the last guards against
-- overselling whatever the application does.

-- +goose Up

-- Organizers are identified by the bearer token's org claim; the row is
-- created on first use.
CREATE TABLE organizers (
    id         uuid PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE events (
    id            uuid PRIMARY KEY,
    organizer_id  uuid NOT NULL REFERENCES organizers (id),
    name          text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    starts_at     timestamptz NOT NULL,
    currency      text NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    purchase_cell text NOT NULL,
    seat_count    integer NOT NULL CHECK (seat_count > 0),
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX event_organizer_idx ON events (organizer_id, created_at);

-- position orders the seat map the way the organizer laid it out. Seats are
-- only ever written together with their event, in the transaction that
-- creates it, so event_id carries no foreign key: its per-row check would
-- double the time to create a 100,000-seat event.
CREATE TABLE seats (
    id          uuid PRIMARY KEY,
    event_id    uuid NOT NULL,
    position    integer NOT NULL,
    section     text NOT NULL,
    label       text NOT NULL,
    price_minor bigint NOT NULL CHECK (price_minor >= 0)
);
CREATE UNIQUE INDEX seat_event_label_uq ON seats (event_id, section, label);
CREATE INDEX seat_event_position_idx ON seats (event_id, position);

CREATE TABLE orders (
    id             uuid PRIMARY KEY,
    user_id        uuid NOT NULL,
    event_id       uuid NOT NULL REFERENCES events (id),
    status         text NOT NULL CHECK (status IN (
        'pending_payment', 'authorized', 'capture_pending', 'paid', 'ticketed',
        'failed', 'canceled', 'refunding', 'refunded')),
    amount_minor   bigint NOT NULL CHECK (amount_minor >= 0),
    currency       text NOT NULL,
    correlation_id text NOT NULL,
    version        integer NOT NULL DEFAULT 0,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX order_user_idx ON orders (user_id, created_at);

CREATE TABLE holds (
    id         uuid PRIMARY KEY,
    order_id   uuid NOT NULL UNIQUE REFERENCES orders (id),
    status     text NOT NULL CHECK (status IN ('active', 'confirmed', 'expired', 'released')),
    expires_at timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
-- The expiry worker's queue: only active holds can expire.
CREATE INDEX hold_expiry_idx ON holds (expires_at) WHERE status = 'active';

CREATE TABLE hold_seats (
    hold_id     uuid NOT NULL REFERENCES holds (id),
    seat_id     uuid NOT NULL REFERENCES seats (id),
    released_at timestamptz,
    PRIMARY KEY (hold_id, seat_id)
);
-- Invariant 1: a seat has at most one unreleased hold row, whatever any
-- process believes.
CREATE UNIQUE INDEX hold_seat_active_uq ON hold_seats (seat_id) WHERE released_at IS NULL;

CREATE TABLE payments (
    order_id          uuid PRIMARY KEY REFERENCES orders (id),
    provider          text NOT NULL,
    payment_intent_id text UNIQUE,
    -- Sensitive: returned to the order's owner only while payment is
    -- pending; never logged, published or put in a URL.
    client_secret     text,
    status            text NOT NULL,
    amount_minor      bigint NOT NULL,
    currency          text NOT NULL,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tickets (
    id        uuid PRIMARY KEY,
    order_id  uuid NOT NULL REFERENCES orders (id),
    seat_id   uuid NOT NULL REFERENCES seats (id),
    issued_at timestamptz NOT NULL DEFAULT now()
);
-- Invariant 1: a seat has at most one ticket, ever.
CREATE UNIQUE INDEX ticket_seat_uq ON tickets (seat_id);
CREATE UNIQUE INDEX ticket_order_seat_uq ON tickets (order_id, seat_id);

-- Invariant 3: a retried request with the same user and key returns the
-- original order. The row is written in the same transaction as the order,
-- so a key is bound only by a request that succeeded.
CREATE TABLE idempotency_keys (
    user_id      uuid NOT NULL,
    key          text NOT NULL,
    request_hash bytea NOT NULL,
    order_id     uuid NOT NULL REFERENCES orders (id),
    response     jsonb NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (user_id, key)
);

-- Invariant 5: every business write inserts its event here in the same
-- transaction; only the relay publishes. id is the event id and the
-- Nats-Msg-Id; seq orders claiming. A row lives here until JetStream has
-- acknowledged it, then the relay deletes it: the outbox holds exactly the
-- events not yet on the bus, and stays small without a retention job.
CREATE TABLE outbox (
    id               uuid PRIMARY KEY,
    seq              bigint GENERATED ALWAYS AS IDENTITY,
    subject          text NOT NULL,
    event_type       text NOT NULL,
    aggregate_id     uuid NOT NULL,
    envelope         json NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    claimed_by       text,
    claim_expires_at timestamptz
);
CREATE INDEX outbox_seq_idx ON outbox (seq);

-- Invariant 4: a consumer applies an event once; the row is written in the
-- same transaction as the consumer's effect.
CREATE TABLE inbox (
    consumer     text NOT NULL,
    event_id     uuid NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- Invariant 4 for Stripe: one effect per Stripe event id.
CREATE TABLE stripe_events (
    id          text PRIMARY KEY,
    type        text NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE stripe_events, inbox, outbox, idempotency_keys, tickets, payments,
    hold_seats, holds, orders, seats, events, organizers;
