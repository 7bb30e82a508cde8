-- Webhook endpoint tooling and secrets at rest (issue 19, items 4 and 5).
--
-- Health the API shows on an endpoint: when one of its deliveries last
-- succeeded (kept to within 10 seconds, so that a busy endpoint's row is
-- not written on every recorded batch) and when it was disabled.
-- Endpoints disabled before this migration get their updated_at as
-- disabled_at: the last change of such a row is, in practice, its
-- disabling.
--
-- acknowledged_at is when the endpoint first answered 2xx to a delivery.
-- It survives replay and recover, so that the dispatcher can count a
-- later send of the same webhook-id to that endpoint as a duplicate
-- delivery. Deliveries that succeeded before this migration are not
-- backfilled (rewriting the largest table in a migration is not worth a
-- metric): their replays are not counted as duplicates.
--
-- Secrets at rest: from now on secret and previous_secret hold
-- v1:<key id>:<base64 of nonce || AES-256-GCM ciphertext>, sealed under a
-- key from BOXOFFICE_WEBHOOK_SECRET_KEYS and bound to the endpoint's id
-- (webhooks.Keyring). SQL cannot seal the rows already there (the key
-- lives only in the environment), so this migration leaves the legacy
-- plaintext whsec_ values as they are: the dispatcher still signs with
-- them, and the work role's webhooks_secrets job re-seals every row not
-- sealed under the current key, in bounded batches, within a minute of
-- starting (and again whenever the key list gains a new first key).
-- Every column is nullable without a default: adding them rewrites no
-- table.

-- +goose Up
ALTER TABLE webhook_endpoints
    ADD COLUMN last_success_at timestamptz,
    ADD COLUMN disabled_at timestamptz;
UPDATE webhook_endpoints SET disabled_at = updated_at WHERE NOT enabled;
ALTER TABLE webhook_deliveries ADD COLUMN acknowledged_at timestamptz;
COMMENT ON COLUMN webhook_endpoints.secret IS
    'v1:<key id>:<base64 nonce||AES-256-GCM ciphertext> (webhooks.Keyring); a legacy whsec_ plaintext until the webhooks_secrets job re-seals it';

-- +goose Down
-- Sealed secrets stay sealed: the code before this migration cannot sign
-- with them, so rotate every endpoint's secret after going back.
COMMENT ON COLUMN webhook_endpoints.secret IS NULL;
ALTER TABLE webhook_deliveries DROP COLUMN acknowledged_at;
ALTER TABLE webhook_endpoints DROP COLUMN disabled_at, DROP COLUMN last_success_at;
