// Package ledger is the one writer of the tickets table: a ticket's row is
// the final ownership of its seat, created when an order is ticketed and
// revoked when the order (or the ticket) is refunded. Issuance (package
// tickets, the Issuer) inserts through Issue; a refund (package purchase)
// revokes through RevokeOrder and RevokeTickets, in the refund's
// transaction.
//
// It is a package of its own, below both domain/tickets and
// domain/purchase, because domain/tickets builds on purchase (it issues
// for paid orders through purchase's OrderTx): the refund can ask this
// package, not domain/tickets itself, without an import cycle. It owns no
// policy (which order gets tickets, which refund revokes what); it says
// how a row may change: a ticket is inserted once, and revoked once.
//
// Every function runs one statement on the caller's transaction, so
// asking here costs no round trip over writing the table in place.
package ledger

import (
	"context"
	"time"

	"github.com/google/uuid"

	"boxoffice/platform/db"
	"boxoffice/sqlcgen"
)

// IssueParams are the tickets of one order, one per seat: IDs[i] is the
// ticket of SeatIDs[i], signed as QRPayloads[i].
type IssueParams struct {
	OrderID    uuid.UUID
	EventID    uuid.UUID
	IssuedAt   time.Time
	IDs        []uuid.UUID
	SeatIDs    []uuid.UUID
	QRPayloads []string
}

// Issue inserts the tickets of p and returns the ids of those it inserted.
// A ticket that exists (a retried issuance: same id, same seat) is left as
// it is, signed payload included; a seat ticketed to another order is
// skipped too, so the caller checks that the order ended up with a ticket
// for each of its seats.
func Issue(ctx context.Context, d db.DBTX, p IssueParams) ([]uuid.UUID, error) {
	return sqlcgen.New().TicketInsertBatch(ctx, d, sqlcgen.TicketInsertBatchParams{
		Ids: p.IDs, OrderID: p.OrderID, EventID: p.EventID, SeatIds: p.SeatIDs, IssuedAt: p.IssuedAt, QrPayloads: p.QRPayloads,
	})
}

// RevokeOrder revokes the order's tickets that are not revoked yet and
// returns how many it revoked. Their seats are released for resale when
// resell is set; else they stay off sale.
func RevokeOrder(ctx context.Context, d db.DBTX, orderID uuid.UUID, resell bool) (int64, error) {
	return sqlcgen.New().TicketRevokeByOrder(ctx, d, sqlcgen.TicketRevokeByOrderParams{OrderID: orderID, Resell: resell})
}

// RevokeTickets revokes the tickets ids of the order that are not revoked
// yet (an id of another order is left alone) and returns how many it
// revoked. Their seats are released for resale when resell is set.
func RevokeTickets(ctx context.Context, d db.DBTX, orderID uuid.UUID, ids []uuid.UUID, resell bool) (int64, error) {
	return sqlcgen.New().TicketRevokeByIDs(ctx, d, sqlcgen.TicketRevokeByIDsParams{OrderID: orderID, Ids: ids, Resell: resell})
}
