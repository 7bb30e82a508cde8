package purchase_test

import (
	"strconv"
	"testing"

	"github.com/google/uuid"

	"boxoffice/domain/purchase"
	"boxoffice/testkit/dbtest"
)

// BenchmarkBestAvailableSoldDown measures one best-available hold of two
// seats, without HTTP, on a 99,500-seat category (199 rows of 500) of
// which the front share given in the name is already taken (blocked, as
// an owner like any other). A pick reads free_seats (00042), so its cost
// should not grow with the seats sold; compare the sub-benchmarks.
func BenchmarkBestAvailableSoldDown(b *testing.B) {
	for _, sold := range []int{0, 50, 90} {
		b.Run("sold="+strconv.Itoa(sold)+"%", func(b *testing.B) {
			e := newBestEvent(b, 199, 500)
			n := 199 * 500 * sold / 100
			dbtest.Exec(b, e.pool, `INSERT INTO seat_blocks (seat_id, event_id, reason, blocked_by)
				SELECT s.id, s.event_id, 'production', gen_random_uuid() FROM seats s
				WHERE s.event_id = $1 AND s.category_id = $2 ORDER BY s.position LIMIT $3`, e.ev.ID, e.stalls, n)
			dbtest.Exec(b, e.pool, "VACUUM ANALYZE free_seats")
			i := 0
			for b.Loop() {
				i++
				if _, err := e.hold(b.Context(), uuid.New(), strconv.Itoa(i), purchase.BestAvailable{Quantity: 2}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
