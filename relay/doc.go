// Package relay is the only publisher of domain events: it moves rows of the
// transactional outbox to the JetStream stream of its namespace
// (Config.Bus.Stream(); bus.Stream by default).
//
// Every state change writes its event to the outbox in the same transaction
// (outbox.Insert), so an event exists exactly when its change committed. The
// relay then, in a loop:
//
//  1. claims a batch of unpublished rows, oldest first, in one statement
//     (the database function outbox_claim), its own short transaction,
//     that reads them and writes one lease (outbox_leases) over their seq
//     range — no row is updated; no transaction stays open while it talks
//     to NATS;
//  2. publishes each row asynchronously, on its subject mapped into the
//     namespace (Config.Bus.Subject), with Nats-Msg-Id = the event id and
//     an expected stream of the namespace's stream;
//  3. waits, at most Config.AckTimeout, for JetStream's acknowledgements;
//  4. in one statement (outbox_settle), its own transaction, deletes the
//     acknowledged rows (the outbox holds exactly the events not yet on the
//     bus), gives rows that were not acknowledged a short, growing retry
//     backoff (retry_at), and ends the lease, so a healthy relay retries
//     them soon.
//
// A claim and a settle are each one round trip to PostgreSQL: the
// functions (migrations/functions/outbox_claim.sql and outbox_settle.sql)
// do the locking, reads and writes a transaction of several statements
// did, under the same locks, and each commits or fails whole.
//
// # Guarantees
//
// Delivery is at least once. A row is deleted only after JetStream
// acknowledged it, because an acknowledgement means the message is stored
// (replicated, for R3 streams); deleting first would lose the event
// whenever the relay died between the delete and the publish. The price is
// duplicates: a relay that dies after the ack and before the delete leaves
// the row under its lease, and once the lease expires another relay
// publishes it again. JetStream drops that second copy when it arrives within the
// stream's Duplicates window (bus.Config.Duplicates, 15 minutes by
// default), answering with PubAck.Duplicate, which the relay counts as
// success. The longest gap between two publishes of one row is about
// Lease + AckTimeout + the largest retry backoff (10 s, 12 s with its jitter), under a minute
// with the defaults, well inside that window. Outside it — a relay stopped
// mid-batch and its rows republished hours later from a restored database —
// a duplicate can reach consumers, which is why every consumer also records
// the event id in its inbox (docs/design/consumers.md).
//
// Order is best effort: rows are claimed and first published in outbox
// order, but concurrent relays and retries reorder them. Consumers must not
// rely on it (docs/design/outbox.md).
//
// While NATS is unreachable the relay keeps running and claims nothing; the
// outbox grows, the boxoffice_outbox_backlog and
// boxoffice_outbox_oldest_unpublished_age_seconds gauges rise, a warning is
// logged at most every few seconds, and the backlog drains when NATS
// returns. Database errors are handled the same way.
//
// Several relays may run over one outbox: claims are serialized by an
// advisory lock, held until the claim's lease is committed, and skip the
// seq ranges of live leases, so no two relays
// hold a row at once, and a dead relay's leases expire and hand its rows
// to the living. A lease may also cover rows outside its batch (committed
// late with a lower seq, or waiting out a retry); they are claimable again
// as soon as the lease ends, at the latest when it expires.
//
// The relay's own statements — claims and settles — commit without waiting
// for their WAL to reach disk (each function sets synchronous_commit off
// for its own transaction only). This is safe because losing one in a
// database crash only makes the relay publish again what JetStream already
// has: a lost claim leaves its rows claimable, a lost delete or release
// brings rows back that are published once more, and JetStream drops the
// copies by Nats-Msg-Id (the consumers' inbox absorbs any that outlive the
// duplicate window). The business write that put a row in the outbox is
// never relaxed: it commits synchronously with the state change it
// describes. Waiting for a disk flush on every claim and delete was the
// relay's largest wait.
//
// Every write of the relay is fenced like any other (the region_fence
// trigger on outbox and outbox_leases): a relay of a failed-over region,
// whose region epoch is no longer current, can neither claim nor settle.
package relay
