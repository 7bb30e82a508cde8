-- name: OrganizerEnsure :exec
-- Creates the organizer row on first use of its id; a no-op afterwards.
INSERT INTO organizers (id) VALUES (@id::uuid)
ON CONFLICT (id) DO NOTHING;
