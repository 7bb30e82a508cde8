package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/tickets/ledger"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

// A ticket is inserted once and revoked once, by id or with its whole
// order: retries of either change nothing more.
func TestTicketsAreIssuedAndRevokedOnce(t *testing.T) {
	t.Parallel()
	ctx, pool := context.Background(), dbtest.New(t)
	ev := fixture.NewEvent(t, pool, fixture.EventSpec{SeatsPerRow: 3})
	h := fixture.Hold(t, pool, ev.ID, "ledger", ev.Seats...)
	fixture.MarkPaid(t, pool, h)
	p := ledger.IssueParams{OrderID: h.OrderID, EventID: ev.ID, IssuedAt: time.Now().Truncate(time.Second)}
	for _, seat := range ev.Seats {
		p.IDs = append(p.IDs, uuid.New())
		p.SeatIDs = append(p.SeatIDs, seat)
		p.QRPayloads = append(p.QRPayloads, "qr")
	}

	inserted, err := ledger.Issue(ctx, pool, p)
	require.NoError(t, err)
	require.ElementsMatch(t, p.IDs, inserted)
	inserted, err = ledger.Issue(ctx, pool, p)
	require.NoError(t, err)
	require.Empty(t, inserted, "a retried issuance inserts nothing")

	n, err := ledger.RevokeTickets(ctx, pool, h.OrderID, p.IDs[:1], true)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	n, err = ledger.RevokeTickets(ctx, pool, uuid.New(), p.IDs[1:2], true)
	require.NoError(t, err)
	require.Zero(t, n, "a ticket of another order is left alone")
	n, err = ledger.RevokeTickets(ctx, pool, h.OrderID, p.IDs[:1], true)
	require.NoError(t, err)
	require.Zero(t, n, "a revoked ticket is not revoked again")

	n, err = ledger.RevokeOrder(ctx, pool, h.OrderID, false)
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the order's tickets left")
	n, err = ledger.RevokeOrder(ctx, pool, h.OrderID, false)
	require.NoError(t, err)
	require.Zero(t, n)

	var resold, kept int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE resale_at IS NOT NULL), count(*) FILTER (WHERE resale_at IS NULL)
		FROM tickets WHERE order_id = $1`, h.OrderID).Scan(&resold, &kept))
	require.Equal(t, 1, resold, "resell releases the seat of the ticket revoked with it")
	require.Equal(t, 2, kept)
}
