package purchase_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/catalog"
	"boxoffice/domain/purchase"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

// BenchmarkSales reads the sales summary of an event of 100,000 seats with
// 50,000 sold (25,000 ticketed orders of two seats) and 1,000 held (500
// orders awaiting payment): the organizer's dashboard on the day.
func BenchmarkSales(b *testing.B) {
	pool, org, ev := onsaleDay(b)
	ctx := context.Background()
	svc := purchase.NewService(pool, slog.New(slog.DiscardHandler), purchase.Config{})
	s, err := svc.Sales(ctx, org, ev.ID)
	require.NoError(b, err)
	require.Equal(b, purchase.SeatCounts{Total: 100000, Available: 49000, Held: 1000, Sold: 50000}, s.Seats)
	require.Equal(b, 25000, s.OrdersByStatus[purchase.OrderTicketed])
	b.ResetTimer()
	for range b.N {
		if _, err := svc.Sales(ctx, org, ev.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSeatInventory reads the waiting room's seat counts of the same
// event: what every admitter pass reads, at most once a second a process.
func BenchmarkSeatInventory(b *testing.B) {
	pool, _, ev := onsaleDay(b)
	ctx := context.Background()
	c := catalog.New(pool)
	inv, err := c.Inventory(ctx, ev.ID)
	require.NoError(b, err)
	require.Equal(b, catalog.Inventory{Seats: 100000, Held: 1000, Sold: 50000}, inv)
	// The seat map the counts replace, walked once a second by the
	// admitter before: the ratio of the two is the point.
	b.Run("counts", func(b *testing.B) {
		for range b.N {
			if _, err := c.Inventory(ctx, ev.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("seat-map", func(b *testing.B) {
		for range b.N {
			if _, err := c.Seats(ctx, ev.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// onsaleDay is an event of 100,000 seats with 50,000 sold (25,000
// ticketed orders of two seats) and 1,000 held (500 orders awaiting
// payment).
func onsaleDay(b *testing.B) (*pgxpool.Pool, uuid.UUID, fixture.Event) {
	pool := dbtest.New(b)
	ctx := context.Background()
	org := uuid.New()
	ev := fixture.NewEvent(b, pool, fixture.EventSpec{OrganizerID: org, Rows: 100, SeatsPerRow: 1000})
	for _, stmt := range []string{
		// Orders o0…o25499: the first 25,000 ticketed, the rest pending.
		`INSERT INTO orders (id, user_id, event_id, status, amount_minor, currency, correlation_id)
		 SELECT md5('o' || g)::uuid, gen_random_uuid(), $1, CASE WHEN g < 25000 THEN 'ticketed' ELSE 'pending_payment' END, 2000, 'eur', 'bench'
		 FROM generate_series(0, 25499) g`,
		`INSERT INTO holds (id, order_id, status, expires_at)
		 SELECT md5('h' || g)::uuid, md5('o' || g)::uuid, CASE WHEN g < 25000 THEN 'confirmed' ELSE 'active' END, now() + interval '1 hour'
		 FROM generate_series(0, 25499) g`,
		// Seat i belongs to order i/2; a ticketed order's seats are released
		// to its tickets.
		`WITH s AS (SELECT id, (row_number() OVER (ORDER BY position) - 1)::int AS i FROM seats WHERE event_id = $1)
		 INSERT INTO hold_seats (hold_id, seat_id, released_at)
		 SELECT md5('h' || (i / 2))::uuid, id, CASE WHEN i < 50000 THEN now() END FROM s WHERE i < 51000`,
		`WITH s AS (SELECT id, (row_number() OVER (ORDER BY position) - 1)::int AS i FROM seats WHERE event_id = $1)
		 INSERT INTO tickets (id, order_id, seat_id, event_id) SELECT gen_random_uuid(), md5('o' || (i / 2))::uuid, id, $1 FROM s WHERE i < 50000`,
		`VACUUM ANALYZE`, // as autovacuum leaves it between onsales
	} {
		var args []any
		if strings.Contains(stmt, "$1") {
			args = []any{ev.ID}
		}
		_, err := pool.Exec(ctx, stmt, args...)
		require.NoError(b, err)
	}
	return pool, org, ev
}
