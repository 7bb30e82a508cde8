// Package consumers is the one runtime every durable JetStream pull consumer
// of Boxoffice runs on, and (one file each) the consumers themselves.
//
// A consumer's file only wires a domain package to the runtime: its name,
// its subjects and its tuning. The rules live in the domain (the purchase
// saga in domain/purchase, the payment commands' policy in
// domain/payments.Commands, ticket issuance in domain/tickets, the fan-out
// in domain/webhooks), and the tables are their owners'; the runtime's
// own inbox rows are platform/inbox's. The package imports no generated
// query (cmd/boxoffice/layers_test.go holds it).
//
// A consumer is a name and a HandlerFunc. The runtime provisions the durable
// consumer on the namespace's stream (Config.Bus.Stream(); bus.Stream by
// default), pulls messages, and handles them in batches: each of
// Config.Concurrency workers takes the next message and whatever else is
// buffered, up to Config.BatchSize (at low load, one message; nothing
// waits for a batch to fill), and for the batch:
//
//  1. decodes and validates each outbox.Envelope; a message that is not a
//     valid envelope is dead-lettered at once, since no retry can fix it;
//  2. opens one transaction (db.WithTx) and inserts the inbox rows
//     (consumer, event_id) of every event in one statement, which tells
//     the events recorded before: their handlers are skipped and their
//     messages acked;
//  3. runs the handlers of the others in that same transaction, in stream
//     order within an order, and commits once;
//  4. acks (or double-acks, see Config.DoubleAck) each message.
//
// A failing handler never takes its batch down: the transaction rolls
// back, the failing message alone goes through the failure policy below,
// and the rest of the batch runs again without it and commits once.
//
// One function, decide, turns what happened into what is done with the
// message: ack, nak with a delay, or dead letter.
//
// A consumer that must call another system (the payment provider) is built
// with NewExternal from an ExternalFunc instead: between steps 1 and 2 the
// runtime reads the inbox rows of the batch's redelivered messages in one
// statement (an event already applied is acked without the call), makes
// the calls of the others concurrently (Config.CallConcurrency at most),
// outside any transaction, and then runs the HandlerFuncs the calls
// returned as step 3; a failed call settles its own message.
// A message whose transaction does not commit is delivered again and its
// call repeated, so the call must be idempotent (the provider's
// idempotency keys make it so); its errors go through decide like a
// handler's.
//
// A consumer whose work is set-based (the webhooks fan-out) is built with
// NewBatch from a BatchFunc instead: between steps 1 and 2 the runtime
// hands it the batch's events once, outside any transaction; it reads
// what it needs for all of them in one go and returns each event's
// error, ErrNoEffect for an event with nothing to apply, and one
// ApplyFunc. An event with an error is settled alone; an event with no
// effect is acked with no inbox row; when no event is left, no
// transaction runs at all. Otherwise step 3 runs the ApplyFunc once for
// all the events the inbox insert returned; when it fails for several,
// which one failed is not known, and each is applied again alone in a
// transaction of its own, so the failure still settles only its own
// message.
//
// # Guarantees
//
// Delivery is at least once, never exactly once: a message is acked only
// after the transaction holding its effect has committed, so a crash or a
// lost ack between the commit and the ack makes JetStream deliver it (and
// the rest of its batch) again.
// The inbox row, written in the effect's transaction, turns that redelivery
// into a no-op, so each consumer applies the effect of each event id at most
// once, and at least once unless the event is dead-lettered. Two stream
// messages carrying the same event id (a republish outside the stream's
// duplicate window) are applied once too.
//
// "Acked" therefore means "committed, or found already committed, or
// found to have no effect" (ErrNoEffect): an ack never precedes the effect
// it stands for. An ack can still be lost; the cost is one redelivery that
// the inbox absorbs, or, for an event with no effect (which has no inbox
// row, having had nothing to guard), one that its BatchFunc plans afresh:
// nothing was applied before, so applying it then is still at most once.
//
// # Failures
//
//   - A handler error wrapping ErrPermanent (see Permanent) rolls the
//     transaction back and dead-letters the message at once; the rest of
//     its batch commits without it.
//   - Any other error, or a panic, rolls the transaction back and naks the
//     message (the rest of its batch commits without it) with a delay of BackoffBase·attempt⁴ ±10%, capped at
//     BackoffMax (river's retry schedule). The failing message never holds
//     up the messages behind it.
//   - A failure on delivery MaxDeliver dead-letters the message instead.
//     A message that comes back after that (its process died, or its dead
//     letter could not be stored) is dead-lettered without running the
//     handler again, so a message that crashes the process cannot loop.
//   - When shutdown gives up waiting for a handler (Config.ShutdownTimeout),
//     the handler's context is canceled, its transaction rolls back and the
//     message is nakked for immediate redelivery elsewhere.
//
// A dead letter is the original body, published to the namespace's
// DLQSubjectPrefix+<consumer> on its DLQStream (bus.DLQSubjectPrefix and
// bus.DLQStream by default) with headers naming the
// consumer, the reason, the delivery count and the original subject and
// sequence. The original is terminated only after the dead letter is
// stored; when storing it fails, the original is nakked and tried again
// later, so a message is never dropped on the floor. The dead letter's
// Nats-Msg-Id is <consumer>:<stream sequence>, so dead-lettering the same
// message twice (after a crash between the two steps) stores it once.
package consumers
