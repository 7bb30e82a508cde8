-- name: EventInsert :one
INSERT INTO events (id, organizer_id, name, starts_at, currency, purchase_cell, seat_count)
VALUES (@id::uuid, @organizer_id::uuid, @name::text, @starts_at::timestamptz, @currency::text,
        @purchase_cell::text, @seat_count::integer)
RETURNING *;

-- name: EventGetByID :one
SELECT * FROM events WHERE id = @id::uuid;

-- name: EventListByOrganizer :many
SELECT * FROM events WHERE organizer_id = @organizer_id::uuid ORDER BY created_at;
