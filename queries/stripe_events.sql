-- name: StripeEventRecord :exec
-- Records a provider event id; one recorded already is a unique violation
-- of stripe_events_pkey (the event was handled before and must have no
-- second effect). Plain, so that it can go with the statement after it
-- (db.Deferring) and its violation still stops the transaction.
INSERT INTO stripe_events (id, type) VALUES (@id::text, @type::text);
