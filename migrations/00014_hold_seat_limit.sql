-- The organizer's per-buyer seat limit (onsales.seat_limit) enforced inside
-- the hold transaction. Checked only before it, as until now, two holds of
-- one buyer racing each other could both pass the check and together
-- exceed the limit. hold_reserve gains p_seat_limit; the old signature is
-- dropped, so no caller can skip the check by calling it.

-- The function itself is defined in functions/hold_reserve.sql, applied by
-- migrations.Up after the versioned migrations; this version keeps only
-- what must happen in order: the drop of the signature it replaced.

-- +goose Up
-- IF EXISTS: a fresh database never had it (00002 no longer creates it).
DROP FUNCTION IF EXISTS hold_reserve(uuid, uuid[], uuid, uuid, uuid, interval, text, bytea, interval, text, uuid);

-- +goose Down
-- Nothing: Down leaves the current hold_reserve of functions/hold_reserve.sql
-- in place. It no longer restores this version's predecessor (the
-- signature without p_seat_limit): function bodies are not versioned, and
-- that body is in the git history of this file.
