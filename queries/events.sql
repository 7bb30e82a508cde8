-- name: EventInsert :one
INSERT INTO events (id, organizer_id, name, starts_at, currency, purchase_cell, seat_count)
VALUES (@id::uuid, @organizer_id::uuid, @name::text, @starts_at::timestamptz, @currency::text,
        @purchase_cell::text, @seat_count::integer)
RETURNING *;

-- name: EventGetByID :one
SELECT * FROM events WHERE id = @id::uuid;

-- name: EventListByOrganizer :many
-- The organizer's events, oldest first, after the cursor (after_created_at,
-- after_id) when given. event_organizer_idx serves it.
SELECT * FROM events
WHERE organizer_id = @organizer_id::uuid
  AND (sqlc.narg(after_created_at)::timestamptz IS NULL
       OR (created_at, id) > (sqlc.narg(after_created_at)::timestamptz, sqlc.narg(after_id)::uuid))
ORDER BY created_at, id
LIMIT @max_rows::int;
