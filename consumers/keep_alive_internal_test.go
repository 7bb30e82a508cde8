package consumers

import (
	"context"
	"testing"
	"time"
)

// A batch's keep-alive, started and stopped before its first progress
// ack, as almost every batch's is.
func BenchmarkKeepAlive(b *testing.B) {
	c := &Consumer{cfg: Config{AckWait: 30 * time.Second}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		c.keepAlive(ctx, nil)()
	}
}
