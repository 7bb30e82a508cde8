package tickets_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/domain/tickets"
	"boxoffice/platform/db"
	"boxoffice/platform/outbox"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

type testBundle struct {
	pool   *pgxpool.Pool
	signer *tickets.Signer
	hold   purchase.Hold
	seats  []uuid.UUID // the order's seats
}

// setup returns an issuer and an order holding two seats, still awaiting
// payment.
func setup(t *testing.T) (*tickets.Issuer, *testBundle) {
	t.Helper()
	pool := dbtest.New(t)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ev := fixture.NewEvent(t, pool, fixture.EventSpec{Name: "t", StartsAt: time.Now(), SeatsPerRow: 6})
	seats := ev.SeatsByID()
	h := fixture.Hold(t, pool, ev.ID, "journey-1", seats[:2]...)
	signer := newSigner(t)
	return tickets.NewIssuer(tickets.IssuerConfig{Signer: signer, Logger: logger}),
		&testBundle{pool: pool, signer: signer, hold: h, seats: seats[:2]}
}

// pay moves the order to paid the way the saga does.
func (b *testBundle) pay(t *testing.T) {
	t.Helper()
	fixture.MarkPaid(t, b.pool, b.hold)
}

func (b *testBundle) issue(t *testing.T, iss *tickets.Issuer) (tickets.Issued, error) {
	t.Helper()
	return db.WithTxV(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) (tickets.Issued, error) {
		return iss.Issue(ctx, tx, tickets.IssueParams{OrderID: b.hold.OrderID, CorrelationID: "journey-1", CausationID: "cause"})
	})
}

func (b *testBundle) status(t *testing.T) string {
	t.Helper()
	var s string
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT status FROM orders WHERE id = $1", b.hold.OrderID).Scan(&s))
	return s
}

func (b *testBundle) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	return dbtest.Count(t, b.pool, sql, args...)
}

func TestIssue(t *testing.T) {
	t.Parallel()

	t.Run("PaidOrderGetsOneSignedTicketPerSeat", func(t *testing.T) {
		t.Parallel()
		iss, b := setup(t)
		b.pay(t)
		res, err := b.issue(t, iss)
		require.NoError(t, err)
		require.True(t, res.Applied)
		want := []uuid.UUID{tickets.ID(b.hold.OrderID, b.seats[0]), tickets.ID(b.hold.OrderID, b.seats[1])}
		require.Equal(t, want, res.TicketIDs)

		require.Equal(t, "ticketed", b.status(t))
		require.EqualValues(t, 0, b.count(t, "SELECT count(*) FROM hold_seats WHERE hold_id = $1 AND released_at IS NULL", b.hold.HoldID),
			"the tickets own the seats now")
		rows, err := b.pool.Query(context.Background(), "SELECT id, seat_id, issued_at, qr_payload FROM tickets ORDER BY seat_id")
		require.NoError(t, err)
		type row struct {
			ID, SeatID uuid.UUID
			IssuedAt   time.Time
			QRPayload  string
		}
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		require.NoError(t, err)
		require.Len(t, got, 2)
		var eventID uuid.UUID
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT event_id FROM orders").Scan(&eventID))
		for i, r := range got {
			require.Equal(t, want[i], r.ID)
			tk, err := tickets.Verify(b.signer.PublicKey(), r.QRPayload)
			require.NoError(t, err)
			require.Equal(t, tickets.Ticket{ID: r.ID, OrderID: b.hold.OrderID, SeatID: r.SeatID, EventID: eventID, IssuedAt: r.IssuedAt.UTC()}, tk)
			_, err = tickets.Verify(newSigner(t).PublicKey(), r.QRPayload)
			require.ErrorIs(t, err, tickets.ErrInvalidPayload)
		}

		var raw []byte
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT envelope FROM outbox WHERE event_type = 'TicketIssued'").Scan(&raw))
		var env outbox.Envelope
		require.NoError(t, json.Unmarshal(raw, &env))
		require.Equal(t, b.hold.OrderID, env.AggregateID)
		require.Equal(t, "journey-1", env.CorrelationID)
		require.Equal(t, "cause", env.CausationID)
		var payload outbox.TicketIssued
		require.NoError(t, json.Unmarshal(env.Payload, &payload))
		require.Equal(t, outbox.TicketIssued{OrderID: b.hold.OrderID, TicketIDs: want}, payload)
	})

	t.Run("RepeatedIssueIsANoop", func(t *testing.T) {
		t.Parallel()
		iss, b := setup(t)
		b.pay(t)
		first, err := b.issue(t, iss)
		require.NoError(t, err)
		var payloads []string
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT array_agg(qr_payload ORDER BY seat_id) FROM tickets").Scan(&payloads))

		again, err := b.issue(t, iss)
		require.NoError(t, err)
		require.False(t, again.Applied)
		require.Equal(t, first.TicketIDs, again.TicketIDs)
		var after []string
		require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT array_agg(qr_payload ORDER BY seat_id) FROM tickets").Scan(&after))
		require.Equal(t, payloads, after, "a ticket's payload is fixed once")
		require.EqualValues(t, 1, b.count(t, "SELECT count(*) FROM outbox WHERE event_type = 'TicketIssued'"))
	})

	t.Run("ConcurrentIssuesTicketOnce", func(t *testing.T) {
		t.Parallel()
		iss, b := setup(t)
		b.pay(t)
		const n = 8
		results := make([]tickets.Issued, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = b.issue(t, iss)
			})
		}
		close(start)
		wg.Wait()
		applied := 0
		for i := range n {
			require.NoError(t, errs[i])
			require.Len(t, results[i].TicketIDs, 2)
			if results[i].Applied {
				applied++
			}
		}
		require.Equal(t, 1, applied)
		require.EqualValues(t, 2, b.count(t, "SELECT count(*) FROM tickets"))
		require.EqualValues(t, 1, b.count(t, "SELECT count(*) FROM outbox WHERE event_type = 'TicketIssued'"))
	})

	t.Run("UnpaidOrderIsTransientThenIssuedOncePaid", func(t *testing.T) {
		t.Parallel()
		iss, b := setup(t)
		for _, st := range []string{"pending_payment", "capture_pending"} {
			dbtest.Exec(t, b.pool, "UPDATE orders SET status = $1", st)
			_, err := b.issue(t, iss)
			require.ErrorIs(t, err, tickets.ErrOrderNotPaid)
		}
		require.EqualValues(t, 0, b.count(t, "SELECT count(*) FROM tickets"))
		require.EqualValues(t, 2, b.count(t, "SELECT count(*) FROM hold_seats WHERE released_at IS NULL"))

		b.pay(t)
		res, err := b.issue(t, iss)
		require.NoError(t, err)
		require.True(t, res.Applied)
		require.EqualValues(t, 2, b.count(t, "SELECT count(*) FROM tickets"))
	})

	t.Run("StaleRequestForReleasedOrderIsIgnored", func(t *testing.T) {
		t.Parallel()
		for _, st := range []string{"failed", "canceled", "refunding", "refunded"} {
			iss, b := setup(t)
			dbtest.Exec(t, b.pool, "UPDATE orders SET status = $1", st)
			res, err := b.issue(t, iss)
			require.NoError(t, err, st)
			require.False(t, res.Applied)
			require.Equal(t, st, b.status(t))
			require.EqualValues(t, 0, b.count(t, "SELECT count(*) FROM tickets"))
			require.EqualValues(t, 0, b.count(t, "SELECT count(*) FROM outbox WHERE event_type = 'TicketIssued'"))
		}
	})

	t.Run("UnknownOrderIsNotFound", func(t *testing.T) {
		t.Parallel()
		iss, b := setup(t)
		_, err := db.WithTxV(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) (tickets.Issued, error) {
			return iss.Issue(ctx, tx, tickets.IssueParams{OrderID: uuid.New()})
		})
		require.ErrorIs(t, err, tickets.ErrOrderNotFound)
	})

	t.Run("SeatTicketedToAnotherOrderRollsBack", func(t *testing.T) {
		t.Parallel()
		iss, b := setup(t)
		b.pay(t)
		// A ticket of another order for one of the seats: the index keeps
		// the seat single-owned, and issuance refuses instead of issuing
		// half the order.
		dbtest.Exec(t, b.pool, `INSERT INTO orders (id, user_id, event_id, status, amount_minor, currency, correlation_id)
			SELECT $1, gen_random_uuid(), event_id, 'ticketed', 0, currency, 'x' FROM orders LIMIT 1`, uuid.New())
		dbtest.Exec(t, b.pool, "INSERT INTO tickets (id, order_id, seat_id, event_id) SELECT gen_random_uuid(), id, $1, event_id FROM orders WHERE status = 'ticketed'", b.seats[1])
		_, err := b.issue(t, iss)
		require.ErrorIs(t, err, tickets.ErrSeatTicketed)
		require.Equal(t, "paid", b.status(t))
		require.EqualValues(t, 0, b.count(t, "SELECT count(*) FROM tickets WHERE order_id = $1", b.hold.OrderID))
	})
}

// TestRefundRacesIssuance races an organizer's refund of a paid order with
// the issuance of its tickets, many times. Either order is legal, and each
// leaves the order owning nothing: tickets issued first are revoked by the
// refund; a refund first releases the seats and issuance then does nothing.
func TestRefundRacesIssuance(t *testing.T) {
	t.Parallel()
	const rounds = 40
	pool := dbtest.New(t)
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ev := fixture.NewEvent(t, pool, fixture.EventSpec{Name: "t", StartsAt: time.Now(), SeatsPerRow: 2 * rounds})
	seats := ev.SeatsByID()
	svc := purchase.NewService(pool, logger, purchase.Config{})
	iss := tickets.NewIssuer(tickets.IssuerConfig{Signer: newSigner(t), Logger: logger})

	outcomes := map[string]int{}
	for i := range rounds {
		mine := seats[2*i : 2*i+2]
		h, err := svc.Hold(ctx, purchase.HoldParams{
			UserID: uuid.New(), EventID: ev.ID, SeatIDs: mine, IdempotencyKey: "k", CorrelationID: "journey",
		})
		require.NoError(t, err)
		dbtest.Exec(t, pool, `INSERT INTO payments (order_id, provider, payment_intent_id, client_secret, status, amount_minor, currency)
			VALUES ($1, 'sandbox', $2, 'pi_x_secret_y', 'succeeded', 2000, 'eur')`, h.OrderID, fmt.Sprintf("pi_%d", i))
		fixture.MarkPaid(t, pool, h)

		var wg sync.WaitGroup
		var refundErr, issueErr error
		wg.Go(func() { _, refundErr = svc.Refund(ctx, ev.OrganizerID, h.OrderID, purchase.RefundOptions{}) })
		wg.Go(func() {
			_, issueErr = db.WithTxV(ctx, pool, func(ctx context.Context, tx pgx.Tx) (tickets.Issued, error) {
				return iss.Issue(ctx, tx, tickets.IssueParams{OrderID: h.OrderID, CorrelationID: "journey", CausationID: "cause"})
			})
		})
		wg.Wait()
		require.NoError(t, refundErr)
		require.NoError(t, issueErr)

		var status string
		require.NoError(t, pool.QueryRow(ctx, "SELECT status FROM orders WHERE id = $1", h.OrderID).Scan(&status))
		require.Equal(t, "refunding", status)
		require.Zero(t, dbtest.Count(t, pool, "SELECT count(*) FROM hold_seats WHERE hold_id = $1 AND released_at IS NULL", h.HoldID),
			"round %d: the refunded order still holds seats", i)
		issued := dbtest.Count(t, pool, "SELECT count(*) FROM tickets WHERE order_id = $1", h.OrderID)
		require.Zero(t, dbtest.Count(t, pool, "SELECT count(*) FROM tickets WHERE order_id = $1 AND revoked_at IS NULL", h.OrderID),
			"round %d: a ticket of a refunded order still admits", i)
		_, err = svc.Hold(ctx, purchase.HoldParams{
			UserID: uuid.New(), EventID: ev.ID, SeatIDs: mine, IdempotencyKey: "again", CorrelationID: "journey",
		})
		switch issued {
		case 2: // issued, then revoked: a seat is ticketed at most once, ever
			var unavailable *purchase.SeatUnavailableError
			require.ErrorAs(t, err, &unavailable, "round %d", i)
			outcomes["issued then revoked"]++
		case 0: // refunded first: the seats are on sale again
			require.NoError(t, err, "round %d", i)
			outcomes["released before issuance"]++
		default:
			t.Fatalf("round %d: %d tickets for 2 seats", i, issued)
		}
	}
	t.Logf("outcomes over %d rounds: %v", rounds, outcomes)
}
