package tickets_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/domain/tickets"
	"boxoffice/ops/audit"
	"boxoffice/platform/db"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

// A comp gets its tickets the way a buyer's paid order does: the tickets
// worker's Issue tickets it and its seats move from the confirmed hold
// to live tickets; the audit finds every invariant holding (a comp has no
// payment and needs none).
func TestIssuedOrderIsTicketed(t *testing.T) {
	t.Parallel()
	pool := dbtest.New(t)
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ev := fixture.NewEvent(t, pool, fixture.EventSpec{Name: "t", StartsAt: time.Now(), SeatsPerRow: 6})
	svc := purchase.NewService(pool, logger, purchase.Config{})
	require.NoError(t, svc.BlockSeats(ctx, purchase.BlockSeatsParams{
		OrganizerID: ev.OrganizerID, UserID: uuid.New(), EventID: ev.ID, SeatIDs: ev.Seats[:1], Reason: purchase.BlockSponsor,
	}))
	require.NoError(t, svc.BlockSeats(ctx, purchase.BlockSeatsParams{
		OrganizerID: ev.OrganizerID, UserID: uuid.New(), EventID: ev.ID, SeatIDs: ev.Seats[4:5], Reason: purchase.BlockKill,
	}))
	o, err := svc.IssueOrder(ctx, purchase.IssueOrderParams{
		OrganizerID: ev.OrganizerID, EventID: ev.ID, RecipientID: uuid.New(), SeatIDs: ev.Seats[:2],
		Channel: purchase.ChannelComp, CorrelationID: "comp-1",
	})
	require.NoError(t, err)

	iss := tickets.NewIssuer(tickets.IssuerConfig{Signer: newSigner(t), Logger: logger})
	issued, err := db.WithTxV(ctx, pool, func(ctx context.Context, tx pgx.Tx) (tickets.Issued, error) {
		return iss.Issue(ctx, tx, tickets.IssueParams{OrderID: o.OrderID, CorrelationID: "comp-1", CausationID: "cause"})
	})
	require.NoError(t, err)
	require.True(t, issued.Applied)
	require.Len(t, issued.TicketIDs, 2)
	require.EqualValues(t, 1, dbtest.Count(t, pool, "SELECT count(*) FROM orders WHERE id = $1 AND status = 'ticketed'", o.OrderID))

	r, err := audit.Run(ctx, pool, nil, audit.Thresholds{})
	require.NoError(t, err)
	for _, c := range r.Checks {
		require.True(t, c.OK(), "%s: %v", c.Name, c.Samples)
	}
}
