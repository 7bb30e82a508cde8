// Package tickets turns a paid order into tickets, and signs each ticket
// into a QR payload that a scanner at the door can check offline.
//
// It owns the check_ins table and decides every tickets row it creates;
// the rows are written by its package ledger, which a refund (package
// purchase) asks to revoke them in the refund's transaction
// (docs/design/payments.md).
//
// # Issuance
//
// Issuer.Issue runs inside the tickets consumer's inbox transaction;
// Issuer.IssuePaid does the same inside the capture webhook's transaction
// (the saga's PaymentCaptured step, purchase.SagaConfig.Tickets), for an
// order that step has just moved to paid. Issue
// locks the order, and only for a paid order inserts one ticket per seat of
// the order's hold, releases the hold's seats (the tickets now own them),
// marks the order ticketed and writes TicketIssued to the outbox. Ticket
// ids are UUIDv5 of (order id, seat id) under Namespace, and the insert
// skips rows that exist, so however often issuance runs an order has one
// ticket per seat with the same ids; ticket_seat_live_uq makes a seat's
// live ticket unique across orders whatever the code does (a refund
// revokes tickets; a seat a refund released for resale is ticketed again
// to its next buyer).
//
// # QR payloads
//
// A payload is ASCII and short enough for a small QR code:
//
//	BX1.<body>.<signature>
//
// body is the unpadded base64url of 72 bytes: ticket id, order id, seat id
// and event id as 16 raw bytes each, then the issue time as big-endian
// unix seconds (8 bytes). signature is the unpadded base64url of the
// 64-byte Ed25519 signature of the ASCII bytes "BX1.<body>", so the
// version prefix is signed too. A scanner needs only the public key
// (GET /v1/ticket-signing-key) and Verify.
//
// A valid signature proves Boxoffice issued the ticket; it does not prove
// the ticket was not refunded since, nor that it was not scanned before.
// Scanners that need either check with the server or a synced list.
//
// # Tables
//
// It owns, as its one writer, check_ins. The tickets table's one writer
// is its package ledger, below both this package and purchase: issuance
// inserts through it, and a refund (domain/purchase) revokes through it in
// the refund's transaction, since this package builds on purchase and
// cannot be asked back from it. The order's state it changes through
// purchase's OrderTx.
package tickets
