// Package stacktest runs Boxoffice the way operators do — api ×2, relay ×2
// and worker ×2 as separate processes of the real binary, on PostgreSQL and
// a 3-node nats-server cluster with R3 streams, all on loopback — drives
// concurrent purchases through it, SIGKILLs a NATS node, a worker and a
// relay mid-run, restarts them, and then requires `boxoffice audit` to
// pass: no oversell, no lost order, every captured payment ticketed or
// refunded, nothing stuck, and no secret in any process's logs.
//
// Its test is behind the build tag "stack" (it builds two binaries and
// runs a dozen processes): run it with `make test-stack`.
package stacktest
