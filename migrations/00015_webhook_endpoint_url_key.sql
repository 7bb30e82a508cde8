-- One endpoint per receiver per organizer. url_key is the endpoint's URL in
-- the form webhooks.URLKey gives (lower-case scheme and host, no default
-- port, ...), set by the service on every create and URL change; the
-- unique index makes a second endpoint of an organizer for the same
-- receiver a conflict, also between concurrent requests.
--
-- Existing endpoints get their URL as it is as their key, the oldest of
-- each organizer's exact duplicates only: the later duplicates keep a NULL
-- key (which the index does not compare) and keep working; a new endpoint
-- or URL change is compared with every key. (A legacy URL spelled other
-- than URLKey's form may therefore still be added once more under its
-- canonical spelling.)

-- +goose Up
ALTER TABLE webhook_endpoints ADD COLUMN url_key text;
UPDATE webhook_endpoints e SET url_key = e.url
WHERE NOT EXISTS (
    SELECT 1 FROM webhook_endpoints o
    WHERE o.organizer_id = e.organizer_id AND o.url = e.url AND (o.created_at, o.id) < (e.created_at, e.id)
);
CREATE UNIQUE INDEX webhook_endpoint_url_key_idx ON webhook_endpoints (organizer_id, url_key);

-- +goose Down
DROP INDEX webhook_endpoint_url_key_idx;
ALTER TABLE webhook_endpoints DROP COLUMN url_key;
