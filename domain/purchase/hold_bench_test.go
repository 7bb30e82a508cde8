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

	"boxoffice/domain/purchase"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

// BenchmarkHold measures the hold transaction without HTTP: 16 concurrent
// buyers holding two adjacent seats at random over a 100,000-seat event.
// Compare with `make bench`, which adds the HTTP path and pgbench.
func BenchmarkHold(b *testing.B) {
	pool := dbtest.New(b)
	ctx := context.Background()
	ev := fixture.NewEvent(b, pool, fixture.EventSpec{Name: "bench", StartsAt: time.Now(), Section: "Floor", Rows: 200, SeatsPerRow: 500, PriceMinor: 5000})
	seats := ev.Seats
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
