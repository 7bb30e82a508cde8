package tickets_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/tickets"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

// benchDoor is a door with n fresh tickets of one event.
func benchDoor(b *testing.B, n int) (*tickets.Door, uuid.UUID, uuid.UUID, []string) {
	b.Helper()
	pool := dbtest.New(b)
	signer := newSigner(b)
	org := uuid.New()
	ev := fixture.NewEvent(b, pool, fixture.EventSpec{OrganizerID: org, Rows: max(1, n/1000), SeatsPerRow: min(n, 1000)})
	_, payloads := fixture.Ticketed(b, pool, signer, ev)
	require.GreaterOrEqual(b, len(payloads), n)
	return tickets.NewDoor(pool, signer.PublicKey()), org, ev.ID, payloads
}

// BenchmarkCheckIn measures single scans, as gates that are online send
// them: 8 scanners at once, each scan its own request to the door (one
// statement to record, one to read back). Run with -benchtime Nx (N ≤
// 20000): every scan is of a fresh ticket.
func BenchmarkCheckIn(b *testing.B) {
	door, org, ev, payloads := benchDoor(b, 20000)
	if b.N > len(payloads) {
		b.Skipf("-benchtime %dx: at most %d scans", b.N, len(payloads))
	}
	var next atomic.Int64
	ctx := context.Background()
	b.SetParallelism(4) // 8 goroutines on 2 cores
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := next.Add(1) - 1
			rs, err := door.CheckIn(ctx, org, ev, []tickets.Scan{{Payload: payloads[i], Gate: "north", ScannedAt: time.Now()}})
			if err != nil || rs[0].Outcome != tickets.Accepted {
				b.Errorf("scan %d: %v %v", i, err, rs)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "scans/s")
}

// BenchmarkCheckInBatch measures offline uploads of 1,000 scans each, one
// at a time. Run with -benchtime Nx (N ≤ 20).
func BenchmarkCheckInBatch(b *testing.B) {
	const batch = tickets.MaxBatch
	door, org, ev, payloads := benchDoor(b, 20*batch)
	if b.N*batch > len(payloads) {
		b.Skipf("-benchtime %dx: at most %d batches", b.N, len(payloads)/batch)
	}
	ctx := context.Background()
	at := time.Now().Add(-time.Hour)
	b.ResetTimer()
	start := time.Now()
	for n := range b.N {
		scans := make([]tickets.Scan, batch)
		for i := range scans {
			scans[i] = tickets.Scan{Payload: payloads[n*batch+i], Gate: fmt.Sprintf("gate-%d", i%4), ScannedAt: at.Add(time.Duration(i) * time.Millisecond)}
		}
		rs, err := door.CheckIn(ctx, org, ev, scans)
		require.NoError(b, err)
		require.Equal(b, tickets.Accepted, rs[batch-1].Outcome)
	}
	b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "scans/s")
}
