-- name: OnsalePhaseList :many
-- The event's phases in opening order.
SELECT * FROM onsale_phases WHERE event_id = @event_id::uuid ORDER BY opens_at;

-- name: OnsalePhaseLockEvent :exec
-- Serialises the changes of one event's phases and codes.
SELECT pg_advisory_xact_lock(hashtextextended('onsale_phases:' || @event_key::text, 0));

-- name: OnsalePhaseUpsert :one
-- Writes a phase, keeping the id of the event's phase of the same name.
INSERT INTO onsale_phases (id, event_id, name, opens_at, presale, category_ids)
VALUES (@id::uuid, @event_id::uuid, @name::text, @opens_at::timestamptz, @presale::bool, @category_ids::uuid[])
ON CONFLICT (event_id, name) DO UPDATE
SET opens_at = excluded.opens_at, presale = excluded.presale, category_ids = excluded.category_ids
RETURNING *;

-- name: OnsalePhaseDeleteOthers :execrows
-- Deletes the event's phases not named, that no code or redemption refers
-- to.
DELETE FROM onsale_phases ph
WHERE ph.event_id = @event_id::uuid AND NOT (ph.name = ANY (@names::text[]))
  AND NOT EXISTS (SELECT 1 FROM presale_codes c WHERE c.phase_id = ph.id)
  AND NOT EXISTS (SELECT 1 FROM presale_redemptions r WHERE r.phase_id = ph.id);

-- name: OnsalePhaseCountOthers :one
-- How many of the event's phases are not named.
SELECT count(*) FROM onsale_phases WHERE event_id = @event_id::uuid AND NOT (name = ANY (@names::text[]));

-- name: OnsalePhaseMoveOpening :exec
-- Parks the event's phase openings out of the way of a rewrite (the
-- openings are unique per event): each moves by 1000 years until the
-- rewrite sets it again.
UPDATE onsale_phases SET opens_at = opens_at + interval '1000 years' WHERE event_id = @event_id::uuid;

-- name: PresaleCodeInsert :exec
INSERT INTO presale_codes (id, event_id, phase_id, code_hash, max_uses, max_seats)
VALUES (@id::uuid, @event_id::uuid, @phase_id::uuid, @code_hash::bytea, @max_uses::int, @max_seats::int);

-- name: PresaleRedemptionGet :one
-- The buyer's redemption for the phase, if any.
SELECT * FROM presale_redemptions WHERE phase_id = @phase_id::uuid AND user_id = @user_id::uuid;

-- name: PresaleCodeUse :one
-- Takes one use of the phase's code with this hash, if it has one left:
-- the row lock makes concurrent redemptions take turns, and each sees the
-- uses the one before it committed.
UPDATE presale_codes
SET uses = uses + 1
WHERE phase_id = @phase_id::uuid AND code_hash = @code_hash::bytea AND uses < max_uses
RETURNING id;

-- name: PresaleRedemptionInsert :execrows
INSERT INTO presale_redemptions (phase_id, user_id, code_id, event_id)
VALUES (@phase_id::uuid, @user_id::uuid, @code_id::uuid, @event_id::uuid)
ON CONFLICT (phase_id, user_id) DO NOTHING;
