-- name: APIKeyLockOrganizer :exec
-- Serialises the creates of one organizer's API keys until the transaction
-- ends, so that counting them and inserting one is atomic.
SELECT pg_advisory_xact_lock(hashtextextended('api_keys:' || (@organizer_id::uuid)::text, 0));

-- name: APIKeyCountActive :one
-- Counts an organizer's keys that are not revoked.
SELECT count(*)::int AS active FROM api_keys
WHERE organizer_id = @organizer_id::uuid AND revoked_at IS NULL;

-- name: APIKeyInsert :one
-- Stores a new key of an organizer: its hash, never the key.
INSERT INTO api_keys (id, organizer_id, name, prefix, secret_hash)
VALUES (@id::uuid, @organizer_id::uuid, @name::text, @prefix::text, @secret_hash::bytea)
RETURNING id, organizer_id, name, prefix, created_at, last_used_at, revoked_at;

-- name: APIKeyList :many
-- Lists an organizer's keys, revoked ones included, oldest first, without
-- their hashes.
SELECT id, organizer_id, name, prefix, created_at, last_used_at, revoked_at
FROM api_keys
WHERE organizer_id = @organizer_id::uuid
ORDER BY created_at, id
LIMIT @max_rows::int;

-- name: APIKeyGetForAuth :one
-- Returns what verifying a presented key needs. Read on every request that
-- presents the key (nothing caches it), so a revocation is seen by the
-- next request.
SELECT organizer_id, secret_hash, last_used_at, revoked_at FROM api_keys WHERE id = @id::uuid;

-- name: APIKeyTouch :exec
-- Records that a key was used, at most once a minute per key, so that a
-- busy key does not write on every request.
UPDATE api_keys SET last_used_at = now()
WHERE id = @id::uuid AND revoked_at IS NULL
  AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute');

-- name: APIKeyRevoke :one
-- Revokes an organizer's key; revoking a revoked key keeps its first
-- revocation time. Another organizer's key is not found.
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE id = @id::uuid AND organizer_id = @organizer_id::uuid
RETURNING id, organizer_id, name, prefix, created_at, last_used_at, revoked_at;
