// Package webhooks is the outbound webhook platform: it tells organizers'
// own systems what happened to their events, per Standard Webhooks
// (https://www.standardwebhooks.com), and it lets them see, retry and
// replay what was sent (docs/design/webhooks.md).
//
// Three parts, each with its own guarantee:
//
//   - The fan-out (FanOut, run as the durable consumer
//     consumers.NewWebhooksFanOut) turns each public fact —
//     order.confirmed, order.paid, ticket.issued, order.failed,
//     order.canceled, order.refunded, hold.expired — into one immutable
//     message per organizer (a stable id, the exact bytes {type,
//     timestamp, data} fixed once) and one pending delivery per enabled
//     endpoint that subscribes to its type, in the transaction that
//     records the event in the inbox. A fact is therefore stored exactly
//     once however often the bus delivers it. A batch of events costs one
//     read and, when an endpoint subscribes to one of them, one
//     transaction of one statement besides the inbox's; an event nobody
//     subscribes to costs no transaction. An endpoint gets every fact
//     whose event committed after the endpoint was created (FanOut).
//
//   - The Dispatcher claims due deliveries fairly across tenants, POSTs
//     them with webhook-id, webhook-timestamp and webhook-signature
//     headers, and records an attempt row for every try with its trigger
//     (original, retry, replay or recover). Delivery is at least once: a crash
//     after the receiver answered and before the attempt was recorded
//     sends the message again with the same webhook-id. Receivers must
//     dedupe on webhook-id. 2xx succeeds; 408, 429, 5xx, timeouts and
//     connection errors are retried on the retry schedule (with jitter,
//     honouring Retry-After) until it is exhausted and the delivery is
//     dead; 410 kills the delivery and disables the endpoint; redirects,
//     other 4xx, 501 and 505 are terminal answers: the delivery is not
//     retried and waits in needs_review (with a delivery.needs_review
//     notice) until recover or replay sends it again. Throttling (concurrency, rate limit,
//     open circuit) puts a delivery back without using an attempt.
//
//   - The Service backs the organizer API: endpoints (with a whsec_
//     secret shown once, rotation with a 24-hour overlap in which both
//     secrets sign), recover, the message log, attempts and replay. A
//     replay sends the same bytes with the same webhook-id and records the
//     attempt as replay; a recover records it as recover. Each replay and
//     recover is recorded with who asked and why (webhook_redeliveries).
//
// Besides the facts about orders there are messages about the organizer's
// own endpoints (MessageTypes lists every type with its data's Go type): a
// webhook.test the organizer asks for (Service.SendTest), sent to that
// endpoint only; and the notices endpoint.disabled (once per disabling by
// the dispatcher), delivery.exhausted (once per delivery whose retries
// ran out) and delivery.needs_review (once per delivery that got a
// terminal answer), stored in the transaction that records the cause and sent
// only to the same organizer's other enabled endpoints whose filter names
// the notice — never to the endpoint it is about, never to another
// organizer, and never about a notice or a test.
//
// Secrets are sealed at rest (Keyring: AES-256-GCM under keys from the
// environment, bound to the endpoint's id) and opened only to sign. An
// attempt whose secret cannot be opened or parsed is failed as
// secret_invalid, counted by reason, and nothing is sent: a delivery is
// never sent unsigned. The Resealer moves rows onto the current key in the
// background, legacy plaintext ones included.
//
// The Guard keeps all of it away from internal networks: URLs are vetted
// when an endpoint is saved, and every connection dials only an address
// it vetted at that moment, so DNS rebinding cannot redirect it.
// Redirects are never followed.
//
// Secrets never appear in logs, errors, metrics or read responses.
//
// It owns, as their one writer, webhook_endpoints, webhook_messages,
// webhook_deliveries and webhook_attempts.
package webhooks
