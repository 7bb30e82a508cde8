// Package waitingroom shapes an onsale's crowd into the rate the purchase
// cell can take (docs/design/admission.md): buyers join an event's waiting room and are
// admitted at R per second, each admission a signed, short-lived admission
// token (package admission) that the hold path verifies.
//
// A Room serves every event of the cell. Its Store keeps the queues, the
// admissions, the token buckets, the rate-limit windows and the revoked
// admissions: RedisStore (one Lua script per operation, so joining twice
// queues once and no queue entry is admitted twice) or MemoryStore when
// REDIS_URL is unset. Buyers who join before a scheduled opening draw a
// crypto-random place in the pre-queue, which goes ahead of everyone who
// joins later, in arrival order.
//
// A Controller adapts R to the cell's health by AIMD, reading Signals
// (hold p99 timed from each hold request's arrival, pool wait, outbox
// age, consumer pending, active holds, and Go's scheduling latency, which
// sees requests waiting for a CPU before any handler runs); a cut counts
// only the hold latencies observed since the previous one. An organizer
// can cap R, pause and schedule the onsale and limit seats per buyer
// (Settings, stored in PostgreSQL and cached for a second).
//
// Queued buyers are told when to poll again (PollAfter: half their
// estimated wait, 1 to 30 seconds), so a long queue's polls cost about its
// length ÷ 30 requests a second. A buyer with more buyers ahead than seats
// left to hold has no estimate and polls every 30 seconds: only holds that
// end can admit them. With InventoryFunc, nobody is admitted
// while the event has no available seat, queued buyers are told when it
// is sold out (no seat available or held), and seats that come back admit
// about as many buyers, in queue order (RoomConfig.InventoryFunc).
//
// Failure: with Redis unreachable, Join and Poll fail closed (no admission
// is issued) and the admitter retries every tick; admissions already
// issued keep working because the hold path needs only the token's
// signature and the in-process copy of the revocations, refreshed from
// Redis every second and kept as it was while Redis is down. When Redis
// answers again, go-redis reconnects and everything resumes by itself.
//
// In PostgreSQL it owns, as their one writer, the onsales table (an
// onsale's settings); a regional failover's stop pauses onsales too
// (ops/failover), in the statement that records which it paused. In Redis
// it owns every boxoffice:wr: key: the queues, admissions, buckets,
// revocations and the processes' shared R. It owns no seat: inventory is
// package purchase's.
package waitingroom
