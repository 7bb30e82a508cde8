package handlers_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/tickets"
	"boxoffice/handlers"
	"boxoffice/platform/db"
	"boxoffice/testkit/dbtest"
)

// pendingOrder is an order of two seats, awaiting payment.
type pendingOrder struct {
	ev        event
	orgToken  string // the event's organizer
	ownerID   uuid.UUID
	owner     string
	id        string
	path      string
	heldSeats []string
}

func (b *testBundle) pendingOrder(t *testing.T) pendingOrder {
	t.Helper()
	o := pendingOrder{orgToken: b.organizer(t)}
	o.ev = b.createEvent(t, o.orgToken)
	o.ownerID, o.owner = b.buyer(t)
	o.heldSeats = o.ev.Seats[:2]
	res := b.hold(t, o.owner, b.admit(t, o.owner, o.ev.ID), o.ev.ID, "k", o.heldSeats...)
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	o.id = res.json(t)["orderId"].(string)
	o.path = "/v1/orders/" + o.id
	return o
}

// withPayment gives the order the payments row the payments consumer
// writes, and returns its client secret.
func (b *testBundle) withPayment(t *testing.T, orderID string) string {
	t.Helper()
	secret := b.remember("pi_test_" + orderID[:8] + "_secret_" + uuid.NewString()[:12])
	dbtest.Exec(t, b.pool, `INSERT INTO payments (order_id, provider, payment_intent_id, client_secret, status, amount_minor, currency)
		VALUES ($1, 'sandbox', $2, $3, 'requires_payment_method', 10000, 'eur')`, orderID, "pi_test_"+orderID[:8], secret)
	return secret
}

func (b *testBundle) setOrderStatus(t *testing.T, orderID, status string) {
	t.Helper()
	if status != "pending_payment" {
		dbtest.Exec(t, b.pool, "UPDATE holds SET status = 'confirmed' WHERE order_id = $1", orderID)
	}
	dbtest.Exec(t, b.pool, "UPDATE orders SET status = $2 WHERE id = $1", orderID, status)
}

func (b *testBundle) outboxCount(t *testing.T, orderID, eventType string) int64 {
	t.Helper()
	return dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox WHERE aggregate_id = $1 AND event_type = $2", orderID, eventType)
}

func TestGetOrderShowsClientSecretOnlyWhilePending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.pendingOrder(t)
	secret := b.withPayment(t, o.id)

	payment := func(tok string) map[string]any {
		res := b.do(t, http.MethodGet, o.path, bearer(tok), nil)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		return res.json(t)["payment"].(map[string]any)
	}
	p := payment(o.owner)
	require.Equal(t, secret, p["clientSecret"])
	require.Equal(t, "pi_test_"+o.id[:8], p["paymentIntentId"])
	require.Equal(t, "requires_payment_method", p["status"])

	_, stranger := b.buyer(t)
	res := b.do(t, http.MethodGet, o.path, bearer(stranger), nil)
	require.Equal(t, http.StatusNotFound, res.status)
	require.NotContains(t, string(res.body), secret)

	for _, st := range []string{"capture_pending", "paid", "canceled"} {
		b.setOrderStatus(t, o.id, st)
		p := payment(o.owner)
		require.NotContains(t, p, "clientSecret", st)
		require.Equal(t, "pi_test_"+o.id[:8], p["paymentIntentId"], st)
	}
}

func TestCancelOrder(t *testing.T) {
	t.Parallel()

	t.Run("OwnerCancelsAndTheSeatsAreFreeAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		o := b.pendingOrder(t)
		b.withPayment(t, o.id)
		for range 2 {
			res := b.do(t, http.MethodPost, o.path+"/cancel", bearer(o.owner), nil)
			require.Equal(t, http.StatusOK, res.status, "%s", res.body)
			body := res.json(t)
			require.Equal(t, "canceled", body["status"])
			require.Equal(t, "released", body["hold"].(map[string]any)["status"])
			require.NotContains(t, body["payment"].(map[string]any), "clientSecret")
		}
		require.EqualValues(t, 1, b.outboxCount(t, o.id, "OrderCanceled"))
		require.EqualValues(t, 1, b.outboxCount(t, o.id, "AuthorizationCancelRequested"))

		_, other := b.buyer(t)
		res := b.hold(t, other, b.admit(t, other, o.ev.ID), o.ev.ID, "k2", o.heldSeats...)
		require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	})

	t.Run("AnyoneButTheOwnerGets404", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		o := b.pendingOrder(t)
		_, stranger := b.buyer(t)
		res := b.do(t, http.MethodPost, o.path+"/cancel", bearer(stranger), nil)
		require.Equal(t, http.StatusNotFound, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeNotFound, problemType(t, res))
		// The event's organizer is no buyer: 403 on every buyer route.
		res = b.do(t, http.MethodPost, o.path+"/cancel", bearer(o.orgToken), nil)
		require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeForbidden, problemType(t, res))
		require.Equal(t, http.StatusUnauthorized, b.do(t, http.MethodPost, o.path+"/cancel", nil, nil).status)
		require.EqualValues(t, 0, b.outboxCount(t, o.id, "OrderCanceled"))
		require.EqualValues(t, 1, activeHolds(t, b.pool, o.heldSeats[0]))
	})

	t.Run("PaidOrderIsAConflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		o := b.pendingOrder(t)
		b.setOrderStatus(t, o.id, "paid")
		res := b.do(t, http.MethodPost, o.path+"/cancel", bearer(o.owner), nil)
		require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeOrderNotCancelable, problemType(t, res))
		require.EqualValues(t, 1, activeHolds(t, b.pool, o.heldSeats[0]))
	})
}

func TestRefundOrder(t *testing.T) {
	t.Parallel()

	t.Run("EventOrganizerRefundsOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		o := b.pendingOrder(t)
		b.withPayment(t, o.id)
		b.setOrderStatus(t, o.id, "ticketed")
		for range 2 {
			res := b.do(t, http.MethodPost, o.path+"/refund", bearer(o.orgToken), nil)
			require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
			require.Equal(t, map[string]any{"id": o.id, "eventId": o.ev.ID, "status": "refunding"}, res.json(t))
		}
		require.EqualValues(t, 1, b.outboxCount(t, o.id, "RefundRequested"))
		got := b.do(t, http.MethodGet, o.path, bearer(o.owner), nil)
		require.Equal(t, "refunding", got.json(t)["status"])
	})

	// A refund retried with its Idempotency-Key gets the first answer, even
	// once the order has moved on, and asks the provider once however many
	// retries run at once; the key with another body is a 409.
	t.Run("RetriedWithItsKeyGetsTheFirstAnswer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		o := b.pendingOrder(t)
		b.withPayment(t, o.id)
		b.setOrderStatus(t, o.id, "paid")
		with := map[string]string{"Authorization": "Bearer " + o.orgToken, "Idempotency-Key": "refund-1"}
		const twins = 6
		res := make([]response, twins)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range twins {
			wg.Go(func() {
				<-start
				res[i] = b.do(t, http.MethodPost, o.path+"/refund", with, map[string]any{"resell": true})
			})
		}
		close(start)
		wg.Wait()
		for i := range twins {
			require.Equal(t, http.StatusAccepted, res[i].status, "%s", res[i].body)
			require.Equal(t, map[string]any{"id": o.id, "eventId": o.ev.ID, "status": "refunding"}, res[i].json(t))
		}
		require.EqualValues(t, 1, b.outboxCount(t, o.id, "RefundRequested"))

		b.setOrderStatus(t, o.id, "refunded")
		again := b.do(t, http.MethodPost, o.path+"/refund", with, map[string]any{"resell": true})
		require.Equal(t, http.StatusAccepted, again.status, "%s", again.body)
		require.Equal(t, "refunding", again.json(t)["status"], "the first answer, replayed")
		plain := b.do(t, http.MethodPost, o.path+"/refund", bearer(o.orgToken), map[string]any{"resell": true})
		require.Equal(t, "refunded", plain.json(t)["status"], "without the key: the order as it is now")

		other := b.do(t, http.MethodPost, o.path+"/refund", with, map[string]any{"resell": false})
		require.Equal(t, http.StatusConflict, other.status, "%s", other.body)
		require.Equal(t, handlers.TypeIdempotencyConflict, problemType(t, other))
		require.EqualValues(t, 1, b.outboxCount(t, o.id, "RefundRequested"))
	})

	t.Run("OtherOrganizerGets404AndBuyerGets403", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		o := b.pendingOrder(t)
		b.withPayment(t, o.id)
		b.setOrderStatus(t, o.id, "paid")
		res := b.do(t, http.MethodPost, o.path+"/refund", bearer(b.organizer(t)), nil)
		require.Equal(t, http.StatusNotFound, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeNotFound, problemType(t, res))
		res = b.do(t, http.MethodPost, o.path+"/refund", bearer(o.owner), nil)
		require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeForbidden, problemType(t, res))
		require.EqualValues(t, 0, b.outboxCount(t, o.id, "RefundRequested"))
	})

	t.Run("RevokesTheTicketsAndListsThemForScanners", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		o := b.pendingOrder(t)
		b.withPayment(t, o.id)
		b.setOrderStatus(t, o.id, "ticketed")
		dbtest.Exec(t, b.pool, `INSERT INTO tickets (id, order_id, seat_id, event_id, issued_at)
			SELECT gen_random_uuid(), $1, hs.seat_id, s.event_id, now()
			FROM hold_seats hs JOIN holds h ON h.id = hs.hold_id JOIN seats s ON s.id = hs.seat_id WHERE h.order_id = $1`, o.id)
		list := "/v1/events/" + o.ev.ID + "/revoked-tickets"
		before := b.do(t, http.MethodGet, list, bearer(o.orgToken), nil)
		require.Equal(t, http.StatusOK, before.status, "%s", before.body)
		require.Equal(t, map[string]any{"tickets": []any{}}, before.json(t))

		require.Equal(t, http.StatusAccepted, b.do(t, http.MethodPost, o.path+"/refund", bearer(o.orgToken), nil).status)
		order := b.do(t, http.MethodGet, o.path, bearer(o.owner), nil).json(t)
		tks := order["tickets"].([]any)
		require.Len(t, tks, 2)
		var ids []any
		for _, tk := range tks {
			require.NotEmpty(t, tk.(map[string]any)["revokedAt"], "the owner sees the ticket revoked")
			ids = append(ids, tk.(map[string]any)["id"])
		}
		after := b.do(t, http.MethodGet, list, bearer(o.orgToken), nil)
		require.Equal(t, http.StatusOK, after.status, "%s", after.body)
		var listed []any
		for _, tk := range after.json(t)["tickets"].([]any) {
			listed = append(listed, tk.(map[string]any)["id"])
		}
		require.ElementsMatch(t, ids, listed)

		stranger := b.do(t, http.MethodGet, list, bearer(b.organizer(t)), nil)
		require.Equal(t, http.StatusNotFound, stranger.status, "another organizer does not see the list")
		require.Equal(t, http.StatusForbidden, b.do(t, http.MethodGet, list, bearer(o.owner), nil).status)
	})

	t.Run("APaidOrderGivesItsSeatsBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		o := b.pendingOrder(t)
		b.withPayment(t, o.id)
		b.setOrderStatus(t, o.id, "paid")
		require.Equal(t, http.StatusAccepted, b.do(t, http.MethodPost, o.path+"/refund", bearer(o.orgToken), nil).status)
		_, other := b.buyer(t)
		res := b.hold(t, other, b.admit(t, other, o.ev.ID), o.ev.ID, "k2", o.heldSeats...)
		require.Equal(t, http.StatusAccepted, res.status, "the refunded order's seats are on sale again: %s", res.body)
	})

	t.Run("PendingOrderIsAConflict", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		o := b.pendingOrder(t)
		res := b.do(t, http.MethodPost, o.path+"/refund", bearer(o.orgToken), nil)
		require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeOrderNotRefundable, problemType(t, res))
	})
}

type sseEvent struct {
	id   string
	name string
	data map[string]any
}

// nextSSE reads one event from r, skipping comment lines; io.EOF when
// the server ended the stream.
func nextSSE(t *testing.T, r *bufio.Reader) (sseEvent, error) {
	t.Helper()
	var ev sseEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && ev.name != "":
			return ev, nil
		case strings.HasPrefix(line, ":"), line == "":
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.data))
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
}

func (b *testBundle) openEvents(t *testing.T, path, tok string) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.srv.URL+path+"/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func TestOrderEvents(t *testing.T) {
	t.Parallel()

	t.Run("StreamsEachStatusUntilFinal", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		o := b.pendingOrder(t)
		res := b.openEvents(t, o.path, o.owner)
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Equal(t, "text/event-stream", res.Header.Get("Content-Type"))
		r := bufio.NewReader(res.Body)

		var last time.Time
		for _, next := range []string{"paid", "ticketed", ""} {
			ev, err := nextSSE(t, r)
			require.NoError(t, err)
			require.Equal(t, "status", ev.name)
			require.Equal(t, o.id, ev.data["orderId"])
			require.True(t, strings.HasPrefix(ev.id, ev.data["status"].(string)+"."), "the event's id names its status: %q", ev.id)
			at, err := time.Parse(time.RFC3339Nano, ev.data["at"].(string))
			require.NoError(t, err)
			require.False(t, at.Before(last))
			last = at
			switch next {
			case "paid":
				require.Equal(t, "pending_payment", ev.data["status"])
			case "ticketed":
				require.Equal(t, "paid", ev.data["status"])
			default:
				require.Equal(t, "ticketed", ev.data["status"])
			}
			if next != "" {
				b.setOrderStatus(t, o.id, next)
			}
		}
		_, err := nextSSE(t, r)
		require.ErrorIs(t, err, io.EOF, "the stream ends once the order is ticketed")
	})

	t.Run("FinalOrderGetsOneEvent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		o := b.pendingOrder(t)
		require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, o.path+"/cancel", bearer(o.owner), nil).status)
		r := bufio.NewReader(b.openEvents(t, o.path, o.owner).Body)
		ev, err := nextSSE(t, r)
		require.NoError(t, err)
		require.Equal(t, "canceled", ev.data["status"])
		_, err = nextSSE(t, r)
		require.ErrorIs(t, err, io.EOF)
	})

	t.Run("AnyoneButTheOwnerGets404", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		o := b.pendingOrder(t)
		_, stranger := b.buyer(t)
		res := b.openEvents(t, o.path, stranger)
		require.Equal(t, http.StatusNotFound, res.StatusCode)
		require.Equal(t, "application/problem+json", res.Header.Get("Content-Type"))
	})
}

// A scanner that fetched the public key verifies the QR payloads the owner
// sees on the order.
func TestTicketSigningKey(t *testing.T) {
	t.Parallel()
	seed, err := tickets.GenerateSeed()
	require.NoError(t, err)
	signer, err := tickets.NewSigner(seed)
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	get := func(h *handlers.Handlers) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/ticket-signing-key", nil))
		return rec
	}
	rec := get(handlers.New(handlers.Config{Cells: noCells(), Logger: logger}))
	require.Equal(t, http.StatusNotFound, rec.Code)
	rec = get(handlers.New(handlers.Config{Cells: noCells(), Logger: logger, TicketPublicKey: signer.PublicKey()}))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var key struct{ Algorithm, PublicKey string }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &key))
	require.Equal(t, "Ed25519", key.Algorithm)
	pub, err := base64.StdEncoding.DecodeString(key.PublicKey)
	require.NoError(t, err)

	b := setup(t)
	o := b.pendingOrder(t)
	b.setOrderStatus(t, o.id, "paid")
	issuer := tickets.NewIssuer(tickets.IssuerConfig{Signer: signer, Logger: logger})
	require.NoError(t, db.WithTx(context.Background(), b.pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := issuer.Issue(ctx, tx, tickets.IssueParams{OrderID: uuid.MustParse(o.id)})
		return err
	}))
	res := b.do(t, http.MethodGet, o.path, bearer(o.owner), nil)
	require.Equal(t, http.StatusOK, res.status)
	body := res.json(t)
	require.Equal(t, "ticketed", body["status"])
	ts := body["tickets"].([]any)
	require.Len(t, ts, 2)
	for _, raw := range ts {
		tk := raw.(map[string]any)
		got, err := tickets.Verify(pub, tk["qrPayload"].(string))
		require.NoError(t, err)
		require.Equal(t, tk["id"], got.ID.String())
		require.Equal(t, tk["seatId"], got.SeatID.String())
		require.Equal(t, o.id, got.OrderID.String())
		require.Equal(t, o.ev.ID, got.EventID.String())
	}
}
