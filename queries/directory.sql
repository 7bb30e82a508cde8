-- The cell directory's probes (package cells): each asks one cell whether
-- it holds a record. An event, order, organizer or intent lives in exactly
-- one cell, and never moves.

-- name: DirectoryHasEvent :one
SELECT EXISTS (SELECT 1 FROM events WHERE id = @id::uuid);

-- name: DirectoryHasOrder :one
SELECT EXISTS (SELECT 1 FROM orders WHERE id = @id::uuid);

-- name: DirectoryHasOrganizer :one
SELECT EXISTS (SELECT 1 FROM organizers WHERE id = @id::uuid);

-- name: DirectoryHasIntent :one
SELECT EXISTS (SELECT 1 FROM sandbox_payment_intents WHERE id = @id::text);
