-- Idempotency-Key on the creating POSTs other than holds (issue 27):
-- creating an event, a webhook endpoint or an API key, and rotating a
-- webhook secret. A row binds one principal's key (the organizer's id) to
-- the first request made with it: its operation and a hash of what it
-- asked (request_hash), and the answer it got (response, the JSON body).
-- The row is written in the same transaction as the request's effect, so a
-- key is bound only by a request that succeeded, and a concurrent twin
-- waits on the row's unique index until the first commits, then reads its
-- answer (platform/idempotency).
--
-- sealed: the response carries a secret shown once (a whsec_ secret, an
-- API key) and is stored AES-256-GCM sealed with the webhook secret keys
-- (BOXOFFICE_WEBHOOK_SECRET_KEYS), never in clear. expires_at: the key's
-- retention (24 hours); after it the key is free again and the row is
-- ignored.
-- Holds keep their own table, idempotency_keys, written by hold_reserve.

-- +goose Up
CREATE TABLE idempotent_requests (
    principal    uuid NOT NULL,
    key          text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    operation    text NOT NULL,
    request_hash bytea NOT NULL CHECK (length(request_hash) = 32),
    response     bytea NOT NULL,
    sealed       boolean NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (principal, key)
);
CREATE INDEX idempotent_requests_expires_brin ON idempotent_requests USING brin (expires_at);
CREATE TRIGGER region_fence BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON idempotent_requests
    FOR EACH STATEMENT EXECUTE FUNCTION region_fence();

-- +goose Down
DROP TABLE idempotent_requests;
