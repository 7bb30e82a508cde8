-- name: CheckInRecord :many
-- Records the first check-in of each scanned ticket of the event: the
-- scans are taken in scanned_at order (then as given), and a ticket that
-- is already in (from before, or from an earlier scan of this batch) is
-- left alone by the primary key, so exactly one scan of a ticket wins
-- however many scanners race. Only live tickets (not revoked) of the
-- event are recorded: a signed payload names an event, but the ticket's
-- order decides which event it admits to. tickets.event_id is that
-- order's event (issuance copies it from the order, whose hold holds only
-- the event's seats), so the check reads nothing more than the ticket's
-- row; a join to orders made the planner start from the event's orders
-- and read all their tickets (docs/performance.md). Only scans timed from
-- the ticket's issue (less clock_skew) to latest are recorded, so a
-- backdated scan cannot win the race and no check-in lies in the future.
-- Each scan costs one primary-key lookup. Returns the tickets it recorded.
INSERT INTO check_ins (ticket_id, event_id, gate, scanned_at)
SELECT x.ticket_id, @event_id::uuid, x.gate, x.scanned_at
FROM (SELECT unnest(@ticket_ids::uuid[]) AS ticket_id, unnest(@gates::text[]) AS gate,
             unnest(@scanned_ats::timestamptz[]) AS scanned_at, generate_subscripts(@ticket_ids::uuid[], 1) AS n) x
JOIN tickets t ON t.id = x.ticket_id AND t.revoked_at IS NULL AND t.event_id = @event_id::uuid
     AND x.scanned_at + @clock_skew::interval >= t.issued_at AND x.scanned_at <= @latest::timestamptz
ORDER BY x.scanned_at, x.n
ON CONFLICT (ticket_id) DO NOTHING
RETURNING ticket_id;

-- name: CheckInState :many
-- What the door knows of the given tickets of the event (tickets of
-- another event's orders are not returned, as in CheckInRecord): when
-- each was issued, revoked or not, and its check-in when there is one.
-- By key only (the event a filter: IS NOT DISTINCT FROM is no index
-- condition), so the tickets of an event the statistics do not know yet
-- are not read whole through ticket_sold_event_idx.
SELECT t.id, t.issued_at, t.revoked_at, c.gate, c.scanned_at, c.recorded_at
FROM tickets t
LEFT JOIN check_ins c ON c.ticket_id = t.id
WHERE t.id = ANY(@ticket_ids::uuid[]) AND t.event_id IS NOT DISTINCT FROM @event_id::uuid;

-- name: CheckInCountsByGate :many
SELECT gate, count(*)::int AS checked_in, max(scanned_at)::timestamptz AS last_scanned_at
FROM check_ins WHERE event_id = @event_id::uuid
GROUP BY gate ORDER BY gate;
