// A buyer's whole path in a browser, with nothing but fetch: the waiting
// room, the seat map, a hold, the order's event stream, payment in the
// sandbox (test mode) and the signed tickets. No build step, no library.
//
// The order stream is read with fetch, not EventSource: EventSource cannot
// send an Authorization header, and the alternatives (a token in the query
// string, or a cookie) would put a bearer token in URLs — access logs,
// proxies, history, Referer — or make the API answer cookies and need
// CSRF defences. fetch sends the header, reads the stream as it arrives
// and can resume with Last-Event-ID, which the API accepts across origins
// listed in BOXOFFICE_CORS_ORIGINS.

/** A client for one buyer of one API. */
export function client(api, token) {
  const headers = (extra = {}) => ({ Authorization: `Bearer ${token}`, ...extra });
  async function call(method, path, { body, headers: extra } = {}) {
    const res = await fetch(api + path, {
      method,
      headers: headers({ ...(body ? { "Content-Type": "application/json" } : {}), ...extra }),
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await res.text();
    const json = text ? JSON.parse(text) : null;
    if (!res.ok) {
      // Every error is an RFC 9457 problem: switch on its type.
      const err = new Error(`${method} ${path}: ${res.status} ${json?.type ?? ""} ${json?.detail ?? ""}`);
      err.status = res.status;
      err.problem = json;
      err.retryAfter = Number(res.headers.get("Retry-After") || 1);
      throw err;
    }
    return { status: res.status, json, headers: res.headers };
  }
  return { call, headers, base: api };
}

const sleep = (s) => new Promise((r) => setTimeout(r, s * 1000));

/** Joins the event's waiting room and polls until admitted; returns the admission token. */
export async function admission(c, eventId, log) {
  let place = await c.call("POST", `/v1/events/${eventId}/waiting-room`);
  for (;;) {
    const budget = place.headers.get("RateLimit");
    if (place.json.status === "admitted") {
      log(`admitted (budget ${budget})`);
      return place.json.admissionToken;
    }
    if (place.json.status === "revoked") throw new Error("admission revoked");
    log(`queued at ${place.json.position}; polling again in ${place.json.pollAfterSeconds}s`);
    await sleep(place.json.pollAfterSeconds);
    try {
      place = await c.call("GET", `/v1/events/${eventId}/waiting-room`);
    } catch (err) {
      if (err.status !== 429) throw err;
      await sleep(err.retryAfter); // over the budget RateLimit announced
    }
  }
}

/**
 * Reads an order's event stream (text/event-stream over fetch) and calls
 * onEvent({event, id, data}) for each event until the stream ends or
 * onEvent returns true. Reconnects with Last-Event-ID when the server ends
 * the stream before the order is final.
 */
export async function followOrder(c, orderId, onEvent) {
  let lastId = "";
  for (;;) {
    const res = await fetch(`${c.base}/v1/orders/${orderId}/events`, {
      headers: c.headers({ Accept: "text/event-stream", ...(lastId ? { "Last-Event-ID": lastId } : {}) }),
    });
    if (res.status === 429) {
      await sleep(Number(res.headers.get("Retry-After") || 5));
      continue;
    }
    if (!res.ok) throw new Error(`order stream: ${res.status}`);
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let end;
      while ((end = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, end);
        buf = buf.slice(end + 2);
        const ev = { event: "message", id: "", data: "" };
        for (const line of block.split("\n")) {
          if (line.startsWith(":")) continue; // keep-alive comment
          const i = line.indexOf(":");
          const field = i < 0 ? line : line.slice(0, i);
          const val = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
          if (field === "event") ev.event = val;
          else if (field === "id") ev.id = val;
          else if (field === "data") ev.data += (ev.data ? "\n" : "") + val;
        }
        if (!ev.data) continue;
        if (ev.id) lastId = ev.id;
        if (await onEvent({ ...ev, data: JSON.parse(ev.data) })) {
          await reader.cancel();
          return;
        }
      }
    }
  }
}

/** Buys one available seat of eventId; returns the ticketed order. */
export async function buy({ api, token, eventId, log = console.log }) {
  const c = client(api, token);
  const admissionToken = await admission(c, eventId, log);

  const seats = await c.call("GET", `/v1/events/${eventId}/seats`);
  const seat = seats.json.seats.find((s) => s.status === "available");
  if (!seat) throw new Error("no seat available");

  // The key is made once per purchase attempt: a retry after a lost answer
  // sends the same key and gets the same order back.
  const key = crypto.randomUUID();
  const hold = await c.call("POST", `/v1/events/${eventId}/holds`, {
    body: { seatIds: [seat.id] },
    headers: { "X-Admission-Token": admissionToken, "Idempotency-Key": key },
  });
  const orderId = hold.json.orderId;
  log(`held seat ${seat.id}: order ${orderId}, pay before ${hold.json.expiresAt}`);

  let final = "";
  await followOrder(c, orderId, async ({ event, data }) => {
    if (event === "payment") {
      // In production: Stripe.js confirms the PaymentIntent with the
      // order's client secret (GET /v1/orders/{id}) and the buyer's card.
      // In test mode the sandbox plays the buyer's card.
      log(`payment ${data.paymentIntentId} ready; paying in the sandbox`);
      await c.call("POST", `/v1/sandbox/payment-intents/${data.paymentIntentId}/authorize`);
      return false;
    }
    log(`order ${data.status}`);
    if (["ticketed", "failed", "canceled", "refunded"].includes(data.status)) {
      final = data.status;
      return true;
    }
    return false;
  });
  const order = (await c.call("GET", `/v1/orders/${orderId}`)).json;
  if (final !== "ticketed") throw new Error(`order ended ${final}`);
  log(`ticket for seat ${order.tickets[0].seatId}: ${order.tickets[0].qrPayload.slice(0, 24)}…`);
  return order;
}

// The page: a form, or a configuration the page's host sets before this
// module runs (window.boxofficeExample = {api, event, token, report}, as
// the headless check in cmd/boxoffice/roles does), whose outcome is then
// posted to report.
const logEl = document.getElementById("log");
const log = (line) => { logEl.textContent += line + "\n"; };

async function run(cfg) {
  try {
    const order = await buy({ api: cfg.api, token: cfg.token, eventId: cfg.event, log });
    log("done");
    return { ok: true, status: order.status, tickets: order.tickets.length, log: logEl.textContent };
  } catch (err) {
    log(`failed: ${err.message}`);
    return { ok: false, error: err.message, log: logEl.textContent };
  }
}

document.getElementById("buy").addEventListener("submit", (e) => {
  e.preventDefault();
  const f = new FormData(e.target);
  run({ api: f.get("api"), token: f.get("token"), event: f.get("event") });
});

const cfg = globalThis.boxofficeExample;
if (cfg) {
  run(cfg).then((result) =>
    fetch(cfg.report, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(result) }));
}
