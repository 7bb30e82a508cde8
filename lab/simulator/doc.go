// Package simulator simulates a high-demand onsale against a running
// Boxoffice stack and reports what happened.
//
// Run drives N buyers that behave like real clients of the public API:
// they arrive over time (spike, ramp or steady), join the waiting room and
// poll it as told (honouring pollAfterSeconds and Retry-After), read the
// seat map and go for the best seats with some randomness, hold with an
// Idempotency-Key that they reuse on timeouts and 5xx, and then pay,
// decline or walk away: at the Stripe stand-in (lab/memstripe) with the
// client secret, as Stripe.js does, when Config.StripeBase names one,
// else through the stack's sandbox payment provider. A buyer who
// stays follows the order by Server-Sent Events from the hold on, as a
// checkout page built on the order stream does: the stream's payment
// event says the PaymentIntent exists (one read of the order then gives
// the client secret), and a status event says when the order is ticketed
// or failed.
//
// Guarantees:
//   - Every hold retry reuses its Idempotency-Key, so a retried hold never
//     creates a second order.
//   - Oversold is computed from what buyers were given (the tickets of
//     their orders) against the seat map, independently of the server's
//     own bookkeeping; the caller adds the invariant audit of package
//     audit when it can reach the database.
//   - Run never logs bearer tokens, admission tokens or client secrets.
//
// Stack starts a whole stack as separate processes (NATS cluster nodes,
// API, relay, workers, and the Stripe stand-in unless it runs the
// sandbox) from one binary, and Chaos kills and restarts some
// of them at random moments. Report writes a self-contained HTML report
// with inline SVG charts and a PNG of the main chart.
package simulator
