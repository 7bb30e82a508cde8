package catalog

// SeatReads is how many seat maps c read from the database.
func SeatReads(c *Catalog) int64 { return c.seatReads.Load() }
