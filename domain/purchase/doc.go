// Package purchase owns an order's life, from the hold that creates it to
// its tickets' refund: the one place that decides what an order and its
// hold may become, and the owner of orders, holds and hold_seats (one
// write is still made elsewhere: ops/reconcile marks an order's
// authorization cancel as requested itself).
//
// What it guarantees, and where:
//
//   - The hold (hold.go, the server-side function hold_reserve): a buyer's
//     request becomes an order pending payment and a hold of its seats in
//     one PostgreSQL statement — every seat or none, at most one active
//     hold per seat (the unique index of unreleased hold_seats rows),
//     idempotent per user and Idempotency-Key — and writes the order's
//     first events (HoldCreated, PaymentAuthorizationRequested) to the
//     outbox in the same transaction.
//   - The lifecycle (lifecycle.go, order_state.go): one table of the moves
//     an order and a hold may make (Transitions, HoldTransitions); every
//     path moves through OrderTx (order_tx.go), which locks the order and
//     its hold, checks the state it expects, moves along the table and
//     emits the order's next event in the same transaction. docs/saga.md's
//     state table is written from these tables.
//   - The saga (saga.go): the steps that follow the provider's facts —
//     an authorization confirms a live hold and asks for the capture, a
//     capture marks the order paid and asks for its tickets, and a late
//     authorization or capture is compensated (canceled or refunded),
//     never attached to an expired order. Saga.Apply runs a step wherever
//     the fact is first applied: in the Stripe ingress's transaction, in
//     the payment commands' for a new intent, or by the purchase_saga
//     consumer for what they could not apply. With SagaConfig.Tickets
//     (the ingress, where the API holds the signing key) a capture also
//     issues its tickets, through the TicketIssuer domain/tickets
//     implements.
//   - Expiry (expiry.go): ExpiredHolds moves up to 500 expired holds and
//     their orders at a time along the same table, and gives their seats
//     back.
//   - Cancel, refunds and partial refunds (cancel.go, refund.go): the
//     buyer's or organizer's requests, under the same lock and table; a
//     refund revokes its tickets and, when the organizer resells, puts
//     their seats back on sale.
//   - Reads for buyers and organizers (order.go, order_change.go,
//     sales.go, checkout.go): an order and its payment state, the changes
//     a buyer's order stream sends, an event's sales.
//
// Other packages ask it rather than touch its tables: the tickets issuer
// locks an order through LockOrderWithHold (or is handed the one a
// capture locked), the payments ingress and commands apply a fact through
// Saga.Apply, the reconciler stamps a cancel request
// through MarkCancelRequested, the handlers and the consumers call its
// services.
//
// # Tables
//
// It owns, as their one writer, holds, hold_seats, orders, refunds and
// idempotency_keys (the hold's keys, in hold_reserve). One write reaches
// a table it does not own, for a reason: hold_reserve writes the hold's
// first event to the outbox in its one statement (one round trip per
// hold). The tickets and payments rows it does not write: a refund
// revokes the order's tickets through domain/tickets/ledger and the saga
// records the provider's status through domain/payments/record, each the
// table's one writer and each in the caller's transaction.
// cmd/boxoffice/layers_test.go (tableOwners, writeExceptions) holds it.
package purchase
