-- Queries of boxoffice audit (audit/). Each returns up to 10 offending
-- subjects and, on every row, the total number of them.

-- name: AuditSeatsWithTwoActiveHolds :many
SELECT seat_id::text AS subject, count(*) OVER ()::bigint AS total
FROM hold_seats
WHERE released_at IS NULL
GROUP BY seat_id
HAVING count(*) > 1
ORDER BY seat_id
LIMIT 10;

-- name: AuditSeatsWithTwoTickets :many
-- Seats with two live tickets (revoked ones, of refunds, do not count).
SELECT seat_id::text AS subject, count(*) OVER ()::bigint AS total
FROM tickets
WHERE revoked_at IS NULL
GROUP BY seat_id
HAVING count(*) > 1
ORDER BY seat_id
LIMIT 10;

-- name: AuditSeatsHeldAndTicketedElsewhere :many
SELECT hs.seat_id::text AS subject, count(*) OVER ()::bigint AS total
FROM hold_seats hs
JOIN holds h ON h.id = hs.hold_id
JOIN tickets t ON t.seat_id = hs.seat_id AND t.order_id <> h.order_id
                 AND (t.revoked_at IS NULL OR t.resale_at IS NULL)
WHERE hs.released_at IS NULL
ORDER BY hs.seat_id
LIMIT 10;

-- name: AuditTicketsWithoutCapture :many
-- Orders the organizer issued (comps, box office: 00036) are paid outside
-- the provider and have no payment.
SELECT t.id::text AS subject, count(*) OVER ()::bigint AS total
FROM tickets t
JOIN orders o ON o.id = t.order_id AND o.channel = 'online'
LEFT JOIN payments p ON p.order_id = t.order_id
WHERE p.order_id IS NULL OR p.status <> 'succeeded'
ORDER BY t.id
LIMIT 10;

-- name: AuditCapturesWithoutTicketsOrRefund :many
-- Captured payments whose order, after the grace period, is neither
-- ticketed nor refunding or refunded.
SELECT p.order_id::text AS subject, count(*) OVER ()::bigint AS total
FROM payments p
JOIN orders o ON o.id = p.order_id
WHERE p.status = 'succeeded'
  AND o.status NOT IN ('ticketed', 'refunding', 'refunded')
  AND greatest(p.updated_at, o.updated_at) < now() - @grace::interval
ORDER BY p.order_id
LIMIT 10;

-- name: AuditRefundsStuck :many
-- Refunds asked for and not confirmed by the provider after the grace
-- period: orders refunding, and refunds of selected tickets still
-- requested (subject: the order).
SELECT x.order_id::text AS subject, count(*) OVER ()::bigint AS total
FROM (
    SELECT o.id AS order_id FROM orders o
    WHERE o.status = 'refunding' AND o.updated_at < now() - @grace::interval
    UNION
    SELECT r.order_id FROM refunds r
    WHERE r.status = 'requested' AND r.requested_at < now() - @grace::interval
) x
ORDER BY x.order_id
LIMIT 10;

-- name: AuditConfirmedOrdersWithoutAuthorization :many
SELECT o.id::text AS subject, count(*) OVER ()::bigint AS total
FROM orders o
LEFT JOIN payments p ON p.order_id = o.id
WHERE o.status IN ('capture_pending', 'paid', 'ticketed') AND o.channel = 'online'
  AND (p.order_id IS NULL OR p.status NOT IN ('requires_capture', 'succeeded'))
ORDER BY o.id
LIMIT 10;

-- name: AuditStaleOutboxRows :many
-- Rows not yet published longer than max_age after their commit.
SELECT (id::text || ' (' || event_type || ', ' ||
        round(extract(epoch FROM now() - created_at))::text || 's old)')::text AS subject,
       count(*) OVER ()::bigint AS total
FROM outbox
WHERE created_at < now() - @max_age::interval
ORDER BY seq
LIMIT 10;

-- name: AuditOverdueActiveHolds :many
-- Holds still active longer than grace past their expiry: the expiry
-- worker is not keeping up, or not running.
SELECT id::text AS subject, count(*) OVER ()::bigint AS total
FROM holds
WHERE status = 'active' AND expires_at < now() - @grace::interval
ORDER BY expires_at
LIMIT 10;

-- name: AuditStuckWebhookDeliveries :many
-- Pending deliveries to an enabled endpoint whose circuit is not open,
-- due longer than max_wait ago and still not attempted.
SELECT d.id::text AS subject, count(*) OVER ()::bigint AS total
FROM webhook_deliveries d
JOIN webhook_endpoints e ON e.id = d.endpoint_id
WHERE d.status = 'pending'
  AND e.enabled
  AND (e.circuit_open_until IS NULL OR e.circuit_open_until < now() - @max_wait::interval)
  AND coalesce(d.next_attempt_at, d.created_at) < now() - @max_wait::interval
ORDER BY d.next_attempt_at
LIMIT 10;

-- name: AuditSeatsMispriced :many
-- Seats without a price category of their own event, or whose price is not
-- their category's (00035: a seat's price is its category's).
SELECT s.id::text AS subject, count(*) OVER ()::bigint AS total
FROM seats s
LEFT JOIN price_categories c ON c.id = s.category_id AND c.event_id = s.event_id
WHERE c.id IS NULL OR c.price_minor <> s.price_minor
ORDER BY s.id
LIMIT 10;

-- name: AuditBlockedSeatsOwned :many
-- Seats the organizer blocked (00036) that an unreleased hold row or a live
-- ticket also owns: a block never coexists with a buyer's hold or a sale.
SELECT b.seat_id::text AS subject, count(*) OVER ()::bigint AS total
FROM seat_blocks b
WHERE EXISTS (SELECT 1 FROM hold_seats hs WHERE hs.seat_id = b.seat_id AND hs.released_at IS NULL)
   OR EXISTS (SELECT 1 FROM tickets t WHERE t.seat_id = b.seat_id AND (t.revoked_at IS NULL OR t.resale_at IS NULL))
ORDER BY b.seat_id
LIMIT 10;

-- name: AuditWaitlistOfferSeats :many
-- Waitlist entries (00041) whose reservation disagrees with their state:
-- a live offer reserves exactly its quantity of seats, and an entry that
-- is not offered reserves none (an ended offer's seats went to its hold,
-- the next entry, or back on sale).
SELECT w.id::text AS subject, count(*) OVER ()::bigint AS total
FROM waitlist_entries w
CROSS JOIN LATERAL (SELECT count(*) AS n FROM seat_blocks b WHERE b.waitlist_entry_id = w.id) r
WHERE (w.state = 'offered' AND r.n <> w.quantity) OR (w.state <> 'offered' AND r.n > 0)
ORDER BY w.id
LIMIT 10;

-- name: AuditIssuedOrdersWithoutTickets :many
-- Orders the organizer issued (comps, box office: 00036) that, after the
-- grace period, are not ticketed (or refunded), or that own no seat through
-- a confirmed hold or tickets: every issued order gets its tickets. One
-- its organizer voided is canceled and owns nothing.
SELECT o.id::text AS subject, count(*) OVER ()::bigint AS total
FROM orders o
WHERE o.channel <> 'online' AND o.status <> 'canceled'
  AND ((o.status = 'paid' AND o.updated_at < now() - @grace::interval)
       OR o.status NOT IN ('paid', 'ticketed', 'refunding', 'refunded')
       OR NOT EXISTS (SELECT 1 FROM holds h JOIN hold_seats hs ON hs.hold_id = h.id
                      WHERE h.order_id = o.id AND h.status = 'confirmed'))
ORDER BY o.id
LIMIT 10;

-- name: AuditFreeSeatsDisagree :many
-- Seats whose place in free_seats (00042) disagrees with their owners: a
-- seat with no owner (no unreleased hold row, no ticket keeping it, no
-- block or offer) that best available cannot find, a seat with an owner
-- that it would propose, or a free seat whose copy of the seat's category,
-- score or place differs.
SELECT coalesce(s.id, f.seat_id)::text AS subject, count(*) OVER ()::bigint AS total
FROM seats s
FULL JOIN free_seats f ON f.seat_id = s.id
WHERE s.id IS NULL
   OR (f.seat_id IS NOT NULL) <> (
          NOT EXISTS (SELECT 1 FROM hold_seats hs WHERE hs.seat_id = s.id AND hs.released_at IS NULL)
      AND NOT EXISTS (SELECT 1 FROM tickets t WHERE t.seat_id = s.id AND (t.revoked_at IS NULL OR t.resale_at IS NULL))
      AND NOT EXISTS (SELECT 1 FROM seat_blocks b WHERE b.seat_id = s.id))
   OR (f.event_id, f.category_id, f.score, f.position, f.section, f.seat_row, f.seat_number)
      IS DISTINCT FROM (s.event_id, s.category_id, s.score, s.position, s.section, s.seat_row, s.seat_number)
      AND f.seat_id IS NOT NULL
ORDER BY 1
LIMIT 10;
