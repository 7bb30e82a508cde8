-- name: WaitlistLockEvent :exec
-- Takes the event's waitlist lock until the transaction ends: joins and
-- offer rounds of one event take turns, so a join sees the seats every
-- round before it left free, and a round sees every entry joined before.
SELECT pg_advisory_xact_lock(hashtextextended('waitlist:' || (@event_id::uuid)::text, 0));

-- name: WaitlistCategoryOfEvent :one
-- The price category, if it is one of the event's.
SELECT c.id FROM price_categories c WHERE c.id = @category_id::uuid AND c.event_id = @event_id::uuid;

-- name: WaitlistEntryInsert :one
INSERT INTO waitlist_entries (id, event_id, category_id, user_id, quantity)
VALUES (@id::uuid, @event_id::uuid, @category_id::uuid, @user_id::uuid, @quantity::int)
RETURNING position, created_at;

-- name: WaitlistEntryGet :one
-- An entry with its place in the queue: how many waiting entries of its
-- event and category are before it (0 unless it is waiting).
SELECT w.id, w.event_id, w.category_id, w.user_id, w.quantity, w.position, w.state, w.offered_at,
       w.offer_expires_at, w.order_id, w.created_at, w.updated_at,
       (SELECT count(*) FROM waitlist_entries a
        WHERE w.state = 'waiting' AND a.event_id = w.event_id AND a.category_id = w.category_id
          AND a.state = 'waiting' AND a.position < w.position)::int AS ahead,
       coalesce((SELECT array_agg(b.seat_id ORDER BY b.seat_id) FROM seat_blocks b WHERE b.waitlist_entry_id = w.id),
                '{}')::uuid[] AS offered_seats
FROM waitlist_entries w
WHERE w.id = @id::uuid;

-- name: WaitlistEntryLock :one
-- Locks an entry for a change of its state.
SELECT id, event_id, category_id, user_id, quantity, state, offer_expires_at,
       (offer_expires_at IS NOT NULL AND offer_expires_at > clock_timestamp())::bool AS offer_live
FROM waitlist_entries WHERE id = @id::uuid
FOR UPDATE;

-- name: WaitlistWaitingLock :many
-- The event's waiting entries in waitlist order, locked (an entry locked
-- by its buyer leaving is skipped: it is leaving).
SELECT id, category_id, user_id, quantity FROM waitlist_entries
WHERE event_id = @event_id::uuid AND state = 'waiting'
ORDER BY position
LIMIT @max::int
FOR UPDATE SKIP LOCKED;

-- name: WaitlistEntryOffer :one
-- Makes a waiting entry an offer until now + @ttl.
UPDATE waitlist_entries SET state = 'offered', offered_at = now(), offer_expires_at = now() + @ttl::interval, updated_at = now()
WHERE id = @id::uuid AND state = 'waiting'
RETURNING offered_at, offer_expires_at;

-- name: WaitlistEntryAccept :exec
UPDATE waitlist_entries SET state = 'accepted', order_id = @order_id::uuid, updated_at = now()
WHERE id = @id::uuid AND state = 'offered';

-- name: WaitlistEntryLeave :exec
UPDATE waitlist_entries SET state = 'left', updated_at = now()
WHERE id = @id::uuid AND state IN ('waiting', 'offered');

-- name: WaitlistOfferClaimExpired :many
-- Locks up to @max offers past their expiry by the database clock, oldest
-- first, skipping those locked (being accepted, or claimed by another
-- sweeper), and ends them.
UPDATE waitlist_entries w SET state = 'expired', updated_at = now()
FROM (SELECT id FROM waitlist_entries
      WHERE state = 'offered' AND offer_expires_at <= clock_timestamp()
      ORDER BY offer_expires_at
      LIMIT @max::int
      FOR UPDATE SKIP LOCKED) x
WHERE w.id = x.id
RETURNING w.id, w.event_id;

-- name: WaitlistEventOfOrder :one
-- The event of an order whose event freed seats.
SELECT event_id FROM orders WHERE id = @order_id::uuid;

-- name: WaitlistEventOrganizer :one
SELECT organizer_id FROM events WHERE id = @event_id::uuid;

-- name: WaitlistWaiting :many
-- For each id, an order's or an event's, that exists: whether the event
-- (the order's) has an entry waiting. Read without any lock: the waitlist
-- consumer's plan, which skips the events nobody waits for.
SELECT k.id::uuid AS id, EXISTS (SELECT 1 FROM waitlist_entries w
                                 WHERE w.event_id = coalesce(o.event_id, k.id) AND w.state = 'waiting') AS waiting
FROM unnest(@ids::uuid[]) AS k(id) LEFT JOIN orders o ON o.id = k.id
WHERE o.id IS NOT NULL OR EXISTS (SELECT 1 FROM events e WHERE e.id = k.id);
