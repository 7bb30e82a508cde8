package catalog

// SeatReads is how many seat maps c read from the database.
func SeatReads(c *Catalog) int64 { return c.seatReads.Load() }

// EventReads is how many events c read from the database.
func EventReads(c *Catalog) int64 { return c.eventReads.Load() }

// MaxCached is how many entries each cache holds at most.
const MaxCached = maxCached

// CachedEvents is how many events and unknown ids c holds in memory.
func CachedEvents(c *Catalog) int {
	c.eventMu.Lock()
	defer c.eventMu.Unlock()
	return len(c.events)
}
