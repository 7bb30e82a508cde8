// Package sandbox is a payments.Provider that stands in for Stripe: its
// PaymentIntents live in PostgreSQL (the sandbox_* tables), its buyer
// actions (authorize, decline) are served under /v1/sandbox, and it sends
// the same signed webhooks Stripe would to the application's own ingress
// (payments.Ingress), retried until acknowledged. Its database work is
// labelled ProviderRole (and the sender's sandbox_webhooks) so that the
// benchmarks can total it apart: a real Stripe costs none of our
// database. It is what `boxoffice dev`, the tests and the benchmarks use
// when BOXOFFICE_PAYMENTS=sandbox.
//
// It owns, as their one writer, the sandbox_* tables, and touches no
// table of the application's.
//
// # What it shares with the product, and what it does not
//
// Its webhook retries take their delays from platform/backoff, as every
// retry in the product does: one Policy (WebhookRetryMin doubling to
// WebhookRetryMax, jittered below), in Sandbox.backoff.
//
// Its idempotency keys (sandbox_idempotency_keys) are its own, not
// platform/idempotency's idempotent_requests, because the two do not
// keep the same promise, and the sandbox must keep Stripe's:
//
//   - Stripe binds a key by its first answer, a refusal included: a
//     capture refused before authorization and retried with the same key
//     after it is refused again. platform/idempotency binds a key only by
//     a request that succeeded, so the retry would capture.
//   - Every request, a replay or a key reused for another request
//     included, is logged in sandbox_requests in its own transaction
//     (RequestCount, by which tests count the provider's captures);
//     platform/idempotency runs nothing on a replay and rolls back a
//     reused key.
//   - Stripe's keys belong to the account, and the sandbox keeps them
//     forever; idempotent_requests keys belong to a principal and expire
//     after a day (ops/retention deletes them).
//   - The sandbox stands in for another company's system: its state,
//     keys included, stays out of the application's tables, so that its
//     database work can be totalled apart (ProviderRole).
//
// Nor does it send through the webhook dispatcher (domain/webhooks): that
// one signs Standard Webhooks headers for organizers' endpoints behind an
// SSRF guard that refuses private addresses, while the sandbox signs as
// Stripe does for the application's own ingress, usually on localhost.
package sandbox
