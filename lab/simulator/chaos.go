package simulator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Chaos SIGKILLs and restarts processes of s at random moments until ctx
// is done: in turn a relay, a worker and a NATS node, each down for 2 to
// 5 seconds, with 3 to 8 seconds between kills. Every process it killed
// is running again when it returns. It returns what it did, with times
// relative to started.
func (s *Stack) Chaos(ctx context.Context, started time.Time) ([]ChaosEvent, error) {
	var events []ChaosEvent
	pick := func(prefix string) string {
		var names []string
		for _, n := range s.Names {
			if strings.HasPrefix(n, prefix+"-") {
				names = append(names, n)
			}
		}
		return names[rand.IntN(len(names))]
	}
	kinds := []string{"relay", "worker", "nats"}
	for i := 0; ; i++ {
		if sleep(ctx, time.Duration(3000+rand.IntN(5000))*time.Millisecond) != nil {
			return events, nil
		}
		name := pick(kinds[i%len(kinds)])
		if err := s.Kill(name); err != nil {
			return events, err
		}
		events = append(events, ChaosEvent{T: time.Since(started).Seconds(), Process: name, Action: "killed"})
		_ = sleep(ctx, time.Duration(2000+rand.IntN(3000))*time.Millisecond) // restart even when ctx ended
		if err := s.Restart(name); err != nil {
			return events, fmt.Errorf("chaos: %w", err)
		}
		events = append(events, ChaosEvent{T: time.Since(started).Seconds(), Process: name, Action: "restarted"})
	}
}
