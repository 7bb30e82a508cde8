package audit_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/purchase"
	"boxoffice/ops/audit"
	"boxoffice/platform/bus"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
	"boxoffice/testkit/natstest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// world is a database with an event of ten seats and, all healthy: a
// pending order, a ticketed order with its captured payment, and an
// order confirmed on an authorized payment.
type world struct {
	pool                         *pgxpool.Pool
	seats                        []uuid.UUID
	pending, ticketed, confirmed purchase.Hold
}

func newWorld(t *testing.T) *world {
	t.Helper()
	pool := dbtest.New(t)
	ctx := context.Background()
	ev := fixture.NewEvent(t, pool, fixture.EventSpec{Name: "audit", StartsAt: time.Now()})
	w := &world{pool: pool}
	w.seats = ev.Seats
	svc := purchase.NewService(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), purchase.Config{})
	hold := func(seat uuid.UUID) purchase.Hold {
		h, err := svc.Hold(ctx, purchase.HoldParams{
			UserID: uuid.New(), EventID: ev.ID, SeatIDs: []uuid.UUID{seat}, IdempotencyKey: "k", CorrelationID: "c",
		})
		require.NoError(t, err)
		return h
	}
	w.pending, w.ticketed, w.confirmed = hold(w.seats[0]), hold(w.seats[1]), hold(w.seats[2])
	w.pay(t, w.ticketed.OrderID, "succeeded")
	dbtest.Exec(t, pool, "UPDATE orders SET status = 'ticketed' WHERE id = $1", w.ticketed.OrderID)
	dbtest.Exec(t, pool, "UPDATE holds SET status = 'confirmed' WHERE id = $1", w.ticketed.HoldID)
	dbtest.Exec(t, pool, "UPDATE hold_seats SET released_at = now() WHERE hold_id = $1", w.ticketed.HoldID)
	w.ticket(t, w.ticketed.OrderID, w.seats[1])
	w.pay(t, w.confirmed.OrderID, "requires_capture")
	dbtest.Exec(t, pool, "UPDATE orders SET status = 'capture_pending' WHERE id = $1", w.confirmed.OrderID)
	dbtest.Exec(t, pool, "UPDATE holds SET status = 'confirmed' WHERE id = $1", w.confirmed.HoldID)
	return w
}

func (w *world) pay(t *testing.T, orderID uuid.UUID, status string) {
	t.Helper()
	dbtest.Exec(t, w.pool, `INSERT INTO payments (order_id, provider, payment_intent_id, client_secret, status, amount_minor, currency)
		VALUES ($1, 'sandbox', $2, 'pi_x_secret_y', $3, 1000, 'eur')`, orderID, "pi_"+strings.ReplaceAll(orderID.String(), "-", ""), status)
}

func (w *world) ticket(t *testing.T, orderID, seat uuid.UUID) {
	t.Helper()
	dbtest.Exec(t, w.pool, "INSERT INTO tickets (id, order_id, seat_id, event_id, issued_at) SELECT gen_random_uuid(), $1, id, event_id, now() FROM seats WHERE id = $2", orderID, seat)
}

func run(t *testing.T, w *world) audit.Report {
	t.Helper()
	r, err := audit.Run(context.Background(), w.pool, nil, audit.Thresholds{})
	require.NoError(t, err)
	return r
}

// failing returns the names of the checks that do not hold.
func failing(r audit.Report) []string {
	var names []string
	for _, c := range r.Checks {
		if !c.OK() {
			names = append(names, c.Name)
		}
	}
	return names
}

func TestHealthyWorldPasses(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r := run(t, w)
	require.True(t, r.OK(), "%v", failing(r))
	require.Len(t, r.Checks, 15)
	var out bytes.Buffer
	require.NoError(t, r.Write(&out))
	require.Contains(t, out.String(), "All 15 invariants hold.")
	require.Contains(t, out.String(), "stream: not checked")
}

// TestEachBrokenInvariantIsFound plants one violation per case in a world
// that passes, and expects exactly that check to fail, naming the subject.
func TestEachBrokenInvariantIsFound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		check string
		plant func(t *testing.T, w *world) string // returns the subject
	}{
		{"seat_two_active_holds", func(t *testing.T, w *world) string {
			dbtest.Exec(t, w.pool, "DROP INDEX hold_seat_active_uq")
			dbtest.Exec(t, w.pool, "INSERT INTO hold_seats (hold_id, seat_id) VALUES ($1, $2)", w.confirmed.HoldID, w.seats[0])
			return w.seats[0].String()
		}},
		{"seat_two_tickets", func(t *testing.T, w *world) string {
			dbtest.Exec(t, w.pool, "DROP INDEX ticket_seat_live_uq")
			dbtest.Exec(t, w.pool, "UPDATE payments SET status = 'succeeded' WHERE order_id = $1", w.confirmed.OrderID)
			dbtest.Exec(t, w.pool, "UPDATE orders SET status = 'ticketed' WHERE id = $1", w.confirmed.OrderID)
			dbtest.Exec(t, w.pool, "UPDATE hold_seats SET released_at = now() WHERE hold_id = $1", w.confirmed.HoldID)
			w.ticket(t, w.confirmed.OrderID, w.seats[1])
			return w.seats[1].String()
		}},
		{"seat_held_and_ticketed", func(t *testing.T, w *world) string {
			dbtest.Exec(t, w.pool, "DELETE FROM tickets")
			w.ticket(t, w.ticketed.OrderID, w.seats[0]) // seat 0 is the pending order's
			return w.seats[0].String()
		}},
		{"ticket_without_capture", func(t *testing.T, w *world) string {
			dbtest.Exec(t, w.pool, "UPDATE payments SET status = 'requires_capture' WHERE order_id = $1", w.ticketed.OrderID)
			var id string
			require.NoError(t, w.pool.QueryRow(context.Background(), "SELECT id::text FROM tickets").Scan(&id))
			return id
		}},
		{"capture_without_tickets_or_refund", func(t *testing.T, w *world) string {
			dbtest.Exec(t, w.pool, "UPDATE payments SET status = 'succeeded', updated_at = now() - interval '1 hour' WHERE order_id = $1", w.confirmed.OrderID)
			dbtest.Exec(t, w.pool, "UPDATE orders SET status = 'paid', updated_at = now() - interval '1 hour' WHERE id = $1", w.confirmed.OrderID)
			return w.confirmed.OrderID.String()
		}},
		{"refund_stuck", func(t *testing.T, w *world) string {
			dbtest.Exec(t, w.pool, "UPDATE orders SET status = 'refunding', updated_at = now() - interval '2 hours' WHERE id = $1", w.ticketed.OrderID)
			return w.ticketed.OrderID.String()
		}},
		{"refund_stuck", func(t *testing.T, w *world) string { // a refund of selected tickets
			dbtest.Exec(t, w.pool, `INSERT INTO refunds (id, order_id, ticket_ids, amount_minor, cumulative_minor, resell, requested_at)
				VALUES (gen_random_uuid(), $1, ARRAY[gen_random_uuid()], 100, 100, false, now() - interval '2 hours')`, w.ticketed.OrderID)
			return w.ticketed.OrderID.String()
		}},
		{"confirmed_without_authorization", func(t *testing.T, w *world) string {
			dbtest.Exec(t, w.pool, "UPDATE payments SET status = 'requires_payment_method' WHERE order_id = $1", w.confirmed.OrderID)
			return w.confirmed.OrderID.String()
		}},
		{"seat_mispriced", func(t *testing.T, w *world) string {
			dbtest.Exec(t, w.pool, "UPDATE seats SET price_minor = price_minor + 1 WHERE id = $1", w.seats[2])
			return w.seats[2].String()
		}},
		{"seat_blocked_and_owned", func(t *testing.T, w *world) string {
			// seat 0 is the pending order's; a block beside its hold.
			dbtest.Exec(t, w.pool, `INSERT INTO seat_blocks (seat_id, event_id, reason, blocked_by)
				SELECT id, event_id, 'press', gen_random_uuid() FROM seats WHERE id = $1`, w.seats[0])
			return w.seats[0].String()
		}},
		{"waitlist_offer_seats", func(t *testing.T, w *world) string {
			// An offer whose reservation is gone: its seat was lost.
			var id string
			require.NoError(t, w.pool.QueryRow(context.Background(), `INSERT INTO waitlist_entries
				(id, event_id, category_id, user_id, quantity, state, offered_at, offer_expires_at)
				SELECT gen_random_uuid(), event_id, category_id, gen_random_uuid(), 1, 'offered', now(), now() + interval '10 minutes'
				FROM seats WHERE id = $1 RETURNING id::text`, w.seats[2]).Scan(&id))
			return id
		}},
		{"free_seats_agree", func(t *testing.T, w *world) string {
			// A free seat best available cannot find.
			dbtest.Exec(t, w.pool, "DELETE FROM free_seats WHERE seat_id = $1", w.seats[5])
			return w.seats[5].String()
		}},
		{"free_seats_agree", func(t *testing.T, w *world) string {
			// A held seat best available would propose.
			dbtest.Exec(t, w.pool, `INSERT INTO free_seats (seat_id, event_id, category_id, score, position, section, seat_row, seat_number)
				SELECT id, event_id, category_id, score, position, section, seat_row, seat_number FROM seats WHERE id = $1`, w.seats[0])
			return w.seats[0].String()
		}},
		{"free_seats_agree", func(t *testing.T, w *world) string {
			// A free seat whose score was changed behind the trigger's back.
			dbtest.Exec(t, w.pool, "UPDATE free_seats SET score = score + 1 WHERE seat_id = $1", w.seats[6])
			return w.seats[6].String()
		}},
		{"issued_order_without_tickets", func(t *testing.T, w *world) string {
			// A comp paid an hour ago whose tickets never came.
			dbtest.Exec(t, w.pool, "UPDATE orders SET channel = 'comp', status = 'paid', updated_at = now() - interval '1 hour' WHERE id = $1", w.confirmed.OrderID)
			dbtest.Exec(t, w.pool, "DELETE FROM payments WHERE order_id = $1", w.confirmed.OrderID)
			return w.confirmed.OrderID.String()
		}},
		{"outbox_unpublished", func(t *testing.T, w *world) string {
			var id string
			require.NoError(t, w.pool.QueryRow(context.Background(),
				"UPDATE outbox SET created_at = now() - interval '2 minutes' WHERE aggregate_id = $1 AND event_type = 'HoldCreated' RETURNING id::text", w.pending.OrderID).Scan(&id))
			return id
		}},
		{"hold_overdue", func(t *testing.T, w *world) string {
			dbtest.Exec(t, w.pool, "UPDATE holds SET expires_at = now() - interval '2 minutes' WHERE id = $1", w.pending.HoldID)
			return w.pending.HoldID.String()
		}},
		{"webhook_delivery_stuck", func(t *testing.T, w *world) string {
			org, msg, ep, d := uuid.New(), uuid.New(), uuid.New(), uuid.New()
			dbtest.Exec(t, w.pool, "INSERT INTO webhook_endpoints (id, organizer_id, url, secret) VALUES ($1, $2, 'https://example.com/hook', 'whsec_x')", ep, org)
			dbtest.Exec(t, w.pool, "INSERT INTO webhook_messages (id, organizer_id, event_type, payload, source_key) VALUES ($1, $2, 'order.paid', '{}', 'k')", msg, org)
			dbtest.Exec(t, w.pool, `INSERT INTO webhook_deliveries (id, message_id, endpoint_id, organizer_id, next_attempt_at)
				VALUES ($1, $2, $3, $4, now() - interval '1 hour')`, d, msg, ep, org)
			return d.String()
		}},
	} {
		t.Run(tc.check, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			subject := tc.plant(t, w)
			r := run(t, w)
			require.False(t, r.OK())
			require.Equal(t, []string{tc.check}, failing(r))
			for _, c := range r.Checks {
				if c.Name == tc.check {
					require.EqualValues(t, 1, c.Count)
					require.Contains(t, c.Samples[0], subject)
				}
			}
			var out bytes.Buffer
			require.NoError(t, r.Write(&out))
			require.Contains(t, out.String(), "FAIL  "+tc.check)
			require.Contains(t, out.String(), subject)
			require.Contains(t, out.String(), "1 of 15 invariants broken.")
		})
	}
}

func TestStreamIsReadWhenReachable(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	srv := natstest.New(t)
	_, js := srv.Connect(t)
	require.NoError(t, bus.Provision(context.Background(), js, bus.Config{}))
	r, err := audit.Run(context.Background(), w.pool, js, audit.Thresholds{})
	require.NoError(t, err)
	require.True(t, r.Stream.Reachable, r.Stream.Error)
	require.Zero(t, r.Stream.DeadLetters)
	var out bytes.Buffer
	require.NoError(t, r.Write(&out))
	require.Contains(t, out.String(), "0 dead letter(s) in TICKETING_DLQ")
}
