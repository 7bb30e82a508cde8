-- name: IdempotentRequestClaim :one
-- Binds the principal's key to this request, first thing in the request's
-- transaction, with an empty answer that IdempotentRequestComplete fills
-- before commit. A key bound by a committed request that has not expired
-- is left alone: no row returned. A concurrent twin's uncommitted claim
-- makes this wait on the unique index until the twin commits (no row) or
-- rolls back (claimed).
INSERT INTO idempotent_requests (principal, key, operation, request_hash, response, sealed, expires_at)
VALUES (@principal::uuid, @key::text, @operation::text, @request_hash::bytea, '\x'::bytea, false,
        now() + @retention::interval)
ON CONFLICT (principal, key) DO UPDATE
SET operation = EXCLUDED.operation, request_hash = EXCLUDED.request_hash, response = EXCLUDED.response,
    sealed = EXCLUDED.sealed, created_at = now(), expires_at = EXCLUDED.expires_at
WHERE idempotent_requests.expires_at <= now()
RETURNING true AS claimed;

-- name: IdempotentRequestGet :one
SELECT operation, request_hash, response, sealed
FROM idempotent_requests
WHERE principal = @principal::uuid AND key = @key::text AND expires_at > now();

-- name: IdempotentRequestComplete :exec
UPDATE idempotent_requests
SET response = @response::bytea, sealed = @sealed::boolean
WHERE principal = @principal::uuid AND key = @key::text;
