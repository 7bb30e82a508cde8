package purchase_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/catalog"
	"boxoffice/domain/purchase"
	"boxoffice/sqlcgen"
	"boxoffice/testkit/dbtest"
)

// TestFreeSeatsFollowTheirOwners walks one event's seats through every
// writer of seat ownership — a named hold, its expiry by the worker and by
// a reclaiming hold, organizer blocks and their release, a comp, its
// tickets and a void with resale, an organizer's scores — and after each
// step holds free_seats (00042, what best available reads) to the owners
// with the audit's own check: a trigger missing on any of those writes
// leaves a seat free but unfindable, or owned but proposed, and fails here.
func TestFreeSeatsFollowTheirOwners(t *testing.T) {
	t.Parallel()
	svc, b := setup(t)
	ctx := t.Context()
	free := func(want int) {
		t.Helper()
		bad, err := sqlcgen.New().AuditFreeSeatsDisagree(ctx, b.pool)
		require.NoError(t, err)
		require.Empty(t, bad, "free_seats disagrees with the owners")
		require.EqualValues(t, want, dbtest.Count(t, b.pool, "SELECT count(*) FROM free_seats WHERE event_id = $1", b.event.ID))
	}
	all := len(b.seats)
	free(all) // seats created come in

	h, err := svc.Hold(ctx, purchase.HoldParams{UserID: uuid.New(), EventID: b.event.ID, SeatIDs: b.seats[:2], IdempotencyKey: "a"})
	require.NoError(t, err)
	free(all - 2)

	// The expiry worker gives the seats back.
	dbtest.Exec(t, b.pool, "UPDATE holds SET expires_at = now() - interval '1 second' WHERE id = $1", h.HoldID)
	n, err := purchase.NewExpirer(b.pool, purchase.ExpirerConfig{}).ExpireBatch(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	free(all)

	// A hold past its expiry, reclaimed by a named hold before the worker
	// runs: the seat passes from one owner to the next.
	h, err = svc.Hold(ctx, purchase.HoldParams{UserID: uuid.New(), EventID: b.event.ID, SeatIDs: b.seats[:1], IdempotencyKey: "b"})
	require.NoError(t, err)
	dbtest.Exec(t, b.pool, "UPDATE holds SET expires_at = now() - interval '1 second' WHERE id = $1", h.HoldID)
	_, err = svc.Hold(ctx, purchase.HoldParams{UserID: uuid.New(), EventID: b.event.ID, SeatIDs: b.seats[:2], IdempotencyKey: "c"})
	require.NoError(t, err)
	free(all - 2)

	// Blocks and their release.
	org := b.event.OrganizerID
	require.NoError(t, svc.BlockSeats(ctx, purchase.BlockSeatsParams{
		OrganizerID: org, UserID: uuid.New(), EventID: b.event.ID, SeatIDs: b.seats[2:5], Reason: purchase.BlockReason("production"),
	}))
	free(all - 5)
	released, err := svc.ReleaseSeats(ctx, org, b.event.ID, b.seats[2:4])
	require.NoError(t, err)
	require.Len(t, released, 2)
	free(all - 3)

	// A comp of a blocked and a free seat, its tickets, and its void with
	// the seats back on sale.
	o, err := svc.IssueOrder(ctx, purchase.IssueOrderParams{
		OrganizerID: org, EventID: b.event.ID, RecipientID: uuid.New(),
		SeatIDs: []uuid.UUID{b.seats[4], b.seats[5]}, Channel: purchase.ChannelComp, CorrelationID: "comp",
	})
	require.NoError(t, err)
	free(all - 4)
	dbtest.Exec(t, b.pool, `INSERT INTO tickets (id, order_id, seat_id, event_id)
		SELECT gen_random_uuid(), h.order_id, hs.seat_id, s.event_id
		FROM hold_seats hs JOIN holds h ON h.id = hs.hold_id JOIN seats s ON s.id = hs.seat_id WHERE h.order_id = $1`, o.OrderID)
	dbtest.Exec(t, b.pool, "UPDATE hold_seats SET released_at = now() WHERE hold_id = $1", o.HoldID)
	dbtest.Exec(t, b.pool, "UPDATE orders SET status = 'ticketed' WHERE id = $1", o.OrderID)
	free(all - 4)
	_, err = svc.Refund(ctx, org, o.OrderID, purchase.RefundOptions{Resell: true})
	require.NoError(t, err)
	free(all - 2)

	// The organizer's scores reach the free seats' copy (the check above
	// compares it).
	require.NoError(t, catalog.New(b.pool).SetSeatScores(ctx, org, b.event.ID, []catalog.SeatScore{{SeatID: b.seats[7], Score: 50}}))
	free(all - 2)
	require.EqualValues(t, 50, dbtest.Count(t, b.pool, "SELECT score FROM free_seats WHERE seat_id = $1", b.seats[7]))
}
