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
package sandbox
