// Package capacity turns what one ticketed order costs, as the purchase
// benchmark measures it (Costs, written by `boxoffice-lab bench purchases
// -costs-out`), into what an onsale needs: the admission rate R one
// purchase cell sustains, the cells, API and worker tasks, PostgreSQL
// connections and JetStream storage (Plan), and a check of the costs
// against the throughput measured with them (PredictShared).
//
// The model starts from the admitted write rate, not the crowd: the
// waiting room turns any number of attempts into R admitted buyers a
// second, so attempts need no capacity of their own.
//
// What it assumes:
//   - CPU is the limit. A cell is one PostgreSQL writer plus its API and
//     worker tasks; the writer's cores bound R.
//   - A cost in CPU milliseconds per order is the same on every machine
//     and at every load: capacity grows linearly with cores, and nothing
//     waits on anything else.
//   - An admitted buyer either pays (PayRatio) and costs PostgreSQL a
//     whole order, or walks away and costs it a hold that expires
//     (AbandonedHoldPostgresMs).
//   - A fraction of every CPU (SafetyMargin) is kept free for the peaks
//     the release controller reacts to.
//   - One event's onsale lives in one cell: more cells carry more events
//     at once, never more of one event.
//   - The API and worker tasks and the stream scale with paid orders;
//     an abandoned hold's share of them is left out.
//
// What it leaves out: lock contention on hot seats, WAL and disk I/O,
// network latency (round trips are counted, not timed), the waiting
// room's Redis, and read traffic that is not part of a purchase (seat
// maps, waiting-room polls). docs/capacity.md has the formulas and a
// worked example.
package capacity
