-- The payload version of each webhook endpoint (issue 27, item 3: one
-- casing for every payload). 1 spells message fields in snake_case, as
-- every endpoint has received them so far; 2 spells the same fields in
-- camelCase, as the REST API does. Existing endpoints keep 1, so no
-- deployed receiver sees its messages change; an endpoint gets 2 by
-- asking, and 2 becomes the default in API version 2 (docs/versioning.md). Messages are stored
-- once, in version 1, and encoded in the endpoint's version when sent.
--
-- A column with a constant default is added without rewriting the table.

-- +goose Up
ALTER TABLE webhook_endpoints
    ADD COLUMN payload_version smallint NOT NULL DEFAULT 1 CHECK (payload_version IN (1, 2));

-- +goose Down
ALTER TABLE webhook_endpoints DROP COLUMN payload_version;
