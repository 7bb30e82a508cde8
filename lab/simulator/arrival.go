package simulator

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// arrivals returns n arrival offsets within d, sorted:
//   - spike: most buyers at the opening, tailing off (exponential decay,
//     about 2/3 in the first fifth of d), as when tickets go on sale at a
//     published time;
//   - ramp: arrivals grow linearly over d;
//   - steady: uniform over d.
func arrivals(pattern string, n int, d time.Duration, rng *rand.Rand) []time.Duration {
	out := make([]time.Duration, n)
	const k = 5.0
	for i := range out {
		u := rng.Float64()
		var f float64
		switch pattern {
		case ArrivalSpike:
			f = -math.Log(1-u*(1-math.Exp(-k))) / k
		case ArrivalRamp:
			f = math.Sqrt(u)
		default:
			f = u
		}
		out[i] = time.Duration(f * float64(d))
	}
	slices.Sort(out)
	return out
}
