package handlers_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/consumers"
	"boxoffice/domain/purchase"
	"boxoffice/domain/waitlist"
	"boxoffice/handlers"
	"boxoffice/platform/db"
	"boxoffice/platform/outbox"
	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
)

// deliverToWaitlist hands the waitlist consumer's handler the outbox's
// eventType events of aggregate, each twice (at-least-once delivery), as
// the consumer runtime would in its inbox transactions.
func (b *testBundle) deliverToWaitlist(t *testing.T, w *waitlist.Service, aggregate, eventType string) {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), "SELECT envelope FROM outbox WHERE aggregate_id = $1 AND event_type = $2", aggregate, eventType)
	require.NoError(t, err)
	envs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outbox.Envelope, error) {
		var raw []byte
		var env outbox.Envelope
		if err := r.Scan(&raw); err != nil {
			return env, err
		}
		return env, json.Unmarshal(raw, &env)
	})
	require.NoError(t, err)
	require.NotEmpty(t, envs, "no %s of %s", eventType, aggregate)
	handle := consumers.WaitlistHandler(w)
	for _, env := range envs {
		for range 2 {
			require.NoError(t, db.WithTx(t.Context(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
				return handle(ctx, tx, env)
			}))
		}
	}
}

// The waitlist through the API, every response checked against
// openapi.yaml: join only when sold out, a seat that comes back (an order
// canceled) is offered to the first entry, once however often the event
// is delivered, visible on GET and queued as a waitlist.offered webhook;
// the accepted offer is an order pending payment, the buyer's; an offer
// not taken in time expires and passes on, and a seat nobody waits for
// goes back on sale.
func TestWaitlistThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w := waitlist.New(b.pool, purchase.NewService(b.pool, testkit.NewLog(t).Logger, purchase.Config{}), waitlist.Config{})
	org, orgID := b.organizerOf(t)
	ev := b.createEvent(t, org, map[string]any{"name": "Floor", "rows": 1, "seatsPerRow": 2, "priceMinor": 5000})
	seatMap := b.do(t, http.MethodGet, "/v1/events/"+ev.ID+"/seats", nil, nil).json(t)
	category := seatMap["seats"].([]any)[0].(map[string]any)["categoryId"].(string)
	base := "/v1/events/" + ev.ID + "/waitlist"
	join := func(tok string) response {
		return b.do(t, http.MethodPost, base, bearer(tok), map[string]any{"categoryId": category, "quantity": 1})
	}
	dbtest.Exec(t, b.pool, "INSERT INTO webhook_endpoints (id, organizer_id, url, secret) VALUES ($1, $2, 'https://example.com/hook', 'whsec_x')",
		uuid.New(), orgID)

	_, first := b.buyer(t)
	res := join(first)
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	require.Equal(t, handlers.TypeWaitlistSeatsAvailable, problemType(t, res))

	// Sold out: two orders of one seat each.
	_, holder := b.buyer(t)
	var orders []string
	for i, seat := range ev.Seats {
		res := b.hold(t, holder, b.admit(t, holder, ev.ID), ev.ID, uuid.NewString(), seat)
		require.Equal(t, http.StatusAccepted, res.status, "hold %d: %s", i, res.body)
		orders = append(orders, res.json(t)["orderId"].(string))
	}
	res = join(first)
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	entry := res.json(t)
	require.Equal(t, "waiting", entry["state"])
	require.Equal(t, http.StatusConflict, join(first).status)
	require.Equal(t, handlers.TypeWaitlistJoined, problemType(t, join(first)))
	_, second := b.buyer(t)
	res = join(second)
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	next := res.json(t)
	require.EqualValues(t, 1, next["ahead"])
	entryPath := base + "/" + entry["id"].(string)
	nextPath := base + "/" + next["id"].(string)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, entryPath, bearer(second), nil).status, "another buyer's entry")
	res = b.do(t, http.MethodPost, entryPath+"/accept", bearer(first), nil)
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	require.Equal(t, handlers.TypeWaitlistOfferNotLive, problemType(t, res))

	// A seat comes back: its holder cancels the order.
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/orders/"+orders[0]+"/cancel", bearer(holder), nil).status)
	b.deliverToWaitlist(t, w, orders[0], outbox.TypeOrderCanceled)
	res = b.do(t, http.MethodGet, entryPath, bearer(first), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	offered := res.json(t)
	require.Equal(t, "offered", offered["state"])
	require.Equal(t, []any{ev.Seats[0]}, offered["offeredSeats"])
	require.NotEmpty(t, offered["offerExpiresAt"])
	require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE event_type = 'WaitlistOffered'"), "delivered twice, offered once")
	var payload []byte
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT m.payload FROM webhook_messages m JOIN webhook_deliveries d ON d.message_id = m.id
		WHERE m.organizer_id = $1 AND m.event_type = 'waitlist.offered'`, orgID).Scan(&payload))
	require.Contains(t, string(payload), entry["id"].(string))
	// Nobody else can hold the offered seat.
	_, other := b.buyer(t)
	res = b.hold(t, other, b.admit(t, other, ev.ID), ev.ID, uuid.NewString(), ev.Seats[0])
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)

	res = b.do(t, http.MethodPost, entryPath+"/accept", bearer(first), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	accepted := res.json(t)
	require.Equal(t, "accepted", accepted["state"])
	order := b.do(t, http.MethodGet, "/v1/orders/"+accepted["orderId"].(string), bearer(first), nil)
	require.Equal(t, http.StatusOK, order.status, "%s", order.body)
	require.Equal(t, "pending_payment", order.json(t)["status"], "paid as any order from here")
	again := b.do(t, http.MethodPost, entryPath+"/accept", bearer(first), nil)
	require.Equal(t, http.StatusOK, again.status)
	require.Equal(t, accepted["orderId"], again.json(t)["orderId"])

	// The other seat comes back to the next buyer, who follows the entry
	// on its event stream and lets the offer expire: it passes on to
	// nobody, and is on sale again.
	stream := b.openEvents(t, nextPath, second)
	require.Equal(t, http.StatusOK, stream.StatusCode)
	require.Equal(t, "text/event-stream", stream.Header.Get("Content-Type"))
	events := bufio.NewReader(stream.Body)
	se, err := nextSSE(t, events)
	require.NoError(t, err)
	require.Equal(t, "entry", se.name)
	require.Equal(t, "waiting", se.data["state"])
	require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, "/v1/orders/"+orders[1]+"/cancel", bearer(holder), nil).status)
	b.deliverToWaitlist(t, w, orders[1], outbox.TypeOrderCanceled)
	se, err = nextSSE(t, events)
	require.NoError(t, err)
	require.Equal(t, "offered", se.data["state"], "the stream tells the buyer of the offer")
	require.Equal(t, []any{ev.Seats[1]}, se.data["offeredSeats"])
	require.Equal(t, "offered", b.do(t, http.MethodGet, nextPath, bearer(second), nil).json(t)["state"])
	dbtest.Exec(t, b.pool, "UPDATE waitlist_entries SET offer_expires_at = now() - interval '1 second' WHERE id = $1", next["id"])
	n, err := w.ExpireOffers(t.Context(), 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	se, err = nextSSE(t, events)
	require.NoError(t, err)
	require.Equal(t, "expired", se.data["state"])
	_, err = nextSSE(t, events)
	require.Error(t, err, "the stream ends with the entry")
	res = b.do(t, http.MethodPost, nextPath+"/accept", bearer(second), nil)
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	require.Equal(t, handlers.TypeWaitlistOfferNotLive, problemType(t, res))
	require.Equal(t, "expired", b.do(t, http.MethodGet, nextPath, bearer(second), nil).json(t)["state"])
	_, late := b.buyer(t)
	require.Equal(t, handlers.TypeWaitlistSeatsAvailable, problemType(t, join(late)), "the seat is on sale again")

	res = b.do(t, http.MethodDelete, nextPath, bearer(second), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Equal(t, "expired", res.json(t)["state"], "leaving an ended entry changes nothing")
}
