-- name: InboxInsertMany :many
-- Records that consumer applied each of event_ids and returns the ids that
-- were not recorded before: the caller applies the effects of those, and
-- only those, in the same transaction. An id given twice is returned once.
INSERT INTO inbox (consumer, event_id)
SELECT @consumer::text, id FROM unnest(@event_ids::uuid[]) AS id
ON CONFLICT (consumer, event_id) DO NOTHING
RETURNING event_id;

-- name: InboxAppliedMany :many
-- Returns which of event_ids consumer has applied already. A consumer that
-- calls out before its transaction reads it first, to skip the call for a
-- redelivery; InboxInsertMany in the transaction stays the guard.
SELECT event_id FROM inbox
WHERE consumer = @consumer::text AND event_id = ANY (@event_ids::uuid[]);
