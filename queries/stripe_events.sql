-- name: StripeEventRecord :exec
-- Records a provider event id, with the order it concerns (null for none);
-- one recorded already is a unique violation of stripe_events_pkey (the
-- event was handled before and must have no second effect). Plain, so
-- that it can go with the statement after it (db.Deferring) and its
-- violation still stops the transaction.
INSERT INTO stripe_events (id, type, order_id) VALUES (@id::text, @type::text, sqlc.narg('order_id')::uuid);

-- name: StripeEventDuplicate :exec
-- Counts a delivery of a provider event id recorded before, which had no
-- effect: the order's timeline shows it as ignored.
UPDATE stripe_events SET duplicates = duplicates + 1, last_duplicate_at = now() WHERE id = @id::text;
