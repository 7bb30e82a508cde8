package roles

import "runtime/debug"

// DefaultGCPercent is the garbage collector's target (GOGC) of the
// product's long-running roles when the environment sets no GOGC: the
// heap may grow by this much over the live heap before a collection.
// Chosen by measurement (docs/performance.md, "GOGC and GOMEMLIMIT":
// `boxoffice-lab bench purchases -product-gogc 100,200,400`): the roles'
// live heaps are small (tens of MB), so a collection costs about the
// same whatever the target, and a larger target means fewer of them.
// GOMEMLIMIT, which the runtime reads itself, bounds the heap where a
// container's memory is limited.
const DefaultGCPercent = 100

// SetGCPercent applies DefaultGCPercent unless GOGC is set, in which case
// the runtime has applied it already. Run calls it for the long-running
// roles; a binary that runs them otherwise (boxoffice-lab's bench part)
// calls it too.
func SetGCPercent(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(DefaultGCPercent)
	}
}
