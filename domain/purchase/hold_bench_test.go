package purchase_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/catalog"
	"boxoffice/domain/purchase"
	"boxoffice/testkit/dbtest"
)

// BenchmarkHold measures the hold transaction without HTTP: 16 concurrent
// buyers holding two adjacent seats at random over a 100,000-seat event.
// Compare with `make bench`, which adds the HTTP path and pgbench.
func BenchmarkHold(b *testing.B) {
	pool := dbtest.New(b)
	ctx := context.Background()
	ev, err := catalog.New(pool).CreateEvent(ctx, catalog.EventParams{
		OrganizerID: uuid.New(), Name: "bench", StartsAt: time.Now(), Currency: "eur", Cell: "default",
		Sections: []catalog.Section{{Name: "Floor", Rows: 200, SeatsPerRow: 500, PriceMinor: 5000}},
	})
	require.NoError(b, err)
	var seats []uuid.UUID
	require.NoError(b, pool.QueryRow(ctx, "SELECT array_agg(id ORDER BY position) FROM seats WHERE event_id = $1", ev.ID).Scan(&seats))
	svc := purchase.NewService(pool, slog.New(slog.NewTextHandler(io.Discard, nil)), purchase.Config{})

	b.SetParallelism(8)
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		user := uuid.New()
		for pb.Next() {
			i := rand.IntN(len(seats) - 1)
			_, err := svc.Hold(ctx, purchase.HoldParams{
				UserID: user, EventID: ev.ID, SeatIDs: []uuid.UUID{seats[i], seats[i+1]},
				IdempotencyKey: uuid.NewString(), CorrelationID: "bench",
			})
			var unavailable *purchase.SeatUnavailableError
			if err != nil && !errors.As(err, &unavailable) {
				b.Error(err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "holds/s")
}
