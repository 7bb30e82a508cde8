// A buyer's hold and order, typed from openapi.yaml: `npm run generate`
// writes boxoffice.d.ts (openapi-typescript), openapi-fetch makes the
// calls with those types, and `npm run check` (tsc) fails when this file
// no longer matches the contract. CI runs all three (.ci/check-typescript).
import createClient from "openapi-fetch";
import type { components, paths } from "./boxoffice";

export type HoldRequest = components["schemas"]["CreateHoldInputBody"];
export type Hold = components["schemas"]["HoldBody"];
export type Order = components["schemas"]["OrderBody"];
export type Problem = components["schemas"]["Problem"];

// The types are the contract's, not `any`: a seat id is a string.
// @ts-expect-error seatIds are strings
const notAHold: HoldRequest = { seatIds: [42] };
void notAHold;

const api = createClient<paths>({ baseUrl: "http://127.0.0.1:8080" });

// holdSeats holds seats for an admitted buyer (token: the buyer's bearer
// token; admission: the waiting room's admissionToken) and reads the
// order it created, or returns the RFC 9457 problem that refused it (a
// 409 /problems/seat-unavailable lists the taken seats in seatIds).
export async function holdSeats(
  token: string,
  admission: string,
  eventId: string,
  seatIds: string[],
): Promise<Order | Problem> {
  const auth = { Authorization: `Bearer ${token}` };
  const body: HoldRequest = { seatIds };
  const held = await api.POST("/v1/events/{eventId}/holds", {
    params: {
      path: { eventId },
      // Retry with the same key to get the same order back.
      header: { "Idempotency-Key": crypto.randomUUID(), "X-Admission-Token": admission },
    },
    headers: auth,
    body,
  });
  if (held.error) {
    const problem: Problem = held.error;
    return problem;
  }
  const hold: Hold = held.data;
  const order = await api.GET("/v1/orders/{orderId}", {
    params: { path: { orderId: hold.orderId } },
    headers: auth,
  });
  if (order.error) {
    return order.error;
  }
  const o: Order = order.data;
  console.log(`order ${o.id}: ${o.status}, seats held until ${o.hold.expiresAt}`);
  return o;
}

export type SandboxIntent = components["schemas"]["SandboxIntentBody"];

// payInSandbox plays the buyer's part at the payment provider, test mode
// only: against a deployment run with the sandbox (BOXOFFICE_PAYMENTS=
// sandbox, as `make run` does) it authorizes the order's PaymentIntent
// (the operations tagged Sandbox, x-test-mode-only in openapi.yaml); a
// deployment on Stripe answers 404, and the buyer pays with Stripe.js.
export async function payInSandbox(token: string, order: Order): Promise<SandboxIntent | Problem> {
  const intent = order.payment?.paymentIntentId;
  if (!intent) {
    return { type: "about:blank", title: "No PaymentIntent yet", status: 409 } as Problem;
  }
  const paid = await api.POST("/v1/sandbox/payment-intents/{id}/authorize", {
    params: { path: { id: intent } },
    headers: { Authorization: `Bearer ${token}` },
  });
  if (paid.error) {
    return paid.error;
  }
  console.log(`intent ${paid.data.paymentIntentId}: ${paid.data.status}`);
  return paid.data;
}
