-- name: TicketListByOrder :many
SELECT * FROM tickets WHERE order_id = @order_id::uuid ORDER BY seat_id;

-- name: TicketInsertBatch :many
-- Inserts the tickets of one order, one per seat, and returns the ids of
-- those it inserted; rows that exist (a retried issuance: same id, same
-- seat) are left as they are, signed payload included. A seat ticketed to
-- another order is skipped too: the caller checks that the order ended up
-- with a ticket for each of its seats.
INSERT INTO tickets (id, order_id, event_id, seat_id, issued_at, qr_payload)
SELECT unnest(@ids::uuid[]), @order_id::uuid, @event_id::uuid, unnest(@seat_ids::uuid[]), @issued_at::timestamptz,
       unnest(@qr_payloads::text[])
ON CONFLICT DO NOTHING
RETURNING id;

-- name: TicketRevokeByOrder :execrows
-- Revokes the order's tickets that are not revoked yet, releasing their
-- seats for resale when resell is true (else they stay off sale).
UPDATE tickets SET revoked_at = now(), resale_at = CASE WHEN @resell::bool THEN now() END
WHERE order_id = @order_id::uuid AND revoked_at IS NULL;

-- name: TicketListRevokedByEvent :many
-- The event's revoked tickets, for scanners' revocation lists.
SELECT t.id, t.revoked_at::timestamptz AS revoked_at
FROM tickets t
JOIN orders o ON o.id = t.order_id
WHERE o.event_id = @event_id::uuid AND t.revoked_at IS NOT NULL
ORDER BY t.revoked_at, t.id;

-- name: TicketLockForRefund :many
-- Locks the order's live tickets among ids, with their seat's price.
SELECT t.id, s.price_minor
FROM tickets t JOIN seats s ON s.id = t.seat_id
WHERE t.order_id = @order_id::uuid AND t.id = ANY(@ids::uuid[]) AND t.revoked_at IS NULL
ORDER BY t.id
FOR UPDATE OF t;

-- name: TicketOfOrderExists :many
-- Which of ids are tickets of the order, live or not.
SELECT id FROM tickets WHERE order_id = @order_id::uuid AND id = ANY(@ids::uuid[]);

-- name: TicketCountLiveByOrder :one
SELECT count(*)::int FROM tickets WHERE order_id = @order_id::uuid AND revoked_at IS NULL;

-- name: TicketRevokeByIDs :execrows
-- Revokes the given tickets of the order, releasing their seats for resale
-- when resell is true.
UPDATE tickets SET revoked_at = now(), resale_at = CASE WHEN @resell::bool THEN now() END
WHERE order_id = @order_id::uuid AND id = ANY(@ids::uuid[]) AND revoked_at IS NULL;
