package handlers_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
	"boxoffice/platform/admission"
	"boxoffice/testkit/dbtest"
)

// Invariant 3 holds past the admission: a hold retried with its
// Idempotency-Key after its admission token expired or was revoked gets
// the order it created — with the order's status now — while a new key
// still needs a valid token, and the same key with another body is a 409.
// Against real PostgreSQL and Redis (the revocation list).
func TestHoldRetryOutlivesItsAdmission(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		*roomBundle
		ev      event
		userID  uuid.UUID
		tok     string
		adm     string
		first   response
		expired string
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		b := setupRoom(t, roomOpts{})
		ev := b.createEvent(t, b.organizerWithID(t))
		userID, tok := b.buyer(t)
		adm := b.admit(t, tok, ev.ID)
		first := b.hold(t, tok, adm, ev.ID, "key-1", ev.Seats[0], ev.Seats[1])
		require.Equal(t, http.StatusAccepted, first.status, "%s", first.body)
		expired := b.remember(mustSign(t, b.signer, admission.Claims{
			ID: uuid.New(), UserID: userID, EventID: uuid.MustParse(ev.ID), Cell: "default",
			IssuedAt: time.Now().Add(-time.Hour), ExpiresAt: time.Now().Add(-time.Minute),
		}))
		return &testBundle{roomBundle: b, ev: ev, userID: userID, tok: tok, adm: adm, first: first, expired: expired}
	}

	t.Run("ExpiredAdmissionRetryReturnsTheOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		before := rowCounts(t, b.pool)
		// The seats in another order: the retry is still answered from its key.
		again := b.hold(t, b.tok, b.expired, b.ev.ID, "key-1", b.ev.Seats[1], b.ev.Seats[0])
		require.Equal(t, http.StatusAccepted, again.status, "%s", again.body)
		require.JSONEq(t, string(b.first.body), string(again.body))
		require.Equal(t, b.first.header.Get("Location"), again.header.Get("Location"))
		require.Equal(t, before, rowCounts(t, b.pool), "a replay writes nothing")
	})

	t.Run("RevokedAdmissionRetryReturnsTheOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		claims, err := b.signer.Verify(b.adm, b.userID, uuid.MustParse(b.ev.ID), "default")
		require.NoError(t, err)
		require.NoError(t, b.room.Revoke(t.Context(), claims.ID, claims.ExpiresAt))
		again := b.hold(t, b.tok, b.adm, b.ev.ID, "key-1", b.ev.Seats[0], b.ev.Seats[1])
		require.Equal(t, http.StatusAccepted, again.status, "%s", again.body)
		require.JSONEq(t, string(b.first.body), string(again.body))
		// A new key with the revoked token creates nothing.
		res := b.hold(t, b.tok, b.adm, b.ev.ID, "key-2", b.ev.Seats[2])
		require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeAdmissionInvalid, problemType(t, res))
	})

	t.Run("NewKeyStillNeedsAValidAdmission", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		before := rowCounts(t, b.pool)
		res := b.hold(t, b.tok, b.expired, b.ev.ID, "key-2", b.ev.Seats[2])
		require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeAdmissionInvalid, problemType(t, res))
		// Another buyer with the first buyer's key learns nothing of it.
		_, other := b.buyer(t)
		res = b.hold(t, other, b.expired, b.ev.ID, "key-1", b.ev.Seats[0], b.ev.Seats[1])
		require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
		require.Equal(t, before, rowCounts(t, b.pool))
	})

	t.Run("SameKeyOtherBodyConflicts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res := b.hold(t, b.tok, b.expired, b.ev.ID, "key-1", b.ev.Seats[2])
		require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
		require.Equal(t, handlers.TypeIdempotencyConflict, problemType(t, res))
	})

	t.Run("ConcurrentRetriesAreAnsweredOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const twins = 8
		res := make([]response, twins)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range twins {
			// Half with the expired token, half with the valid one: every
			// answer is the first order, and nothing more is held.
			adm := b.adm
			if i%2 == 0 {
				adm = b.expired
			}
			wg.Go(func() {
				<-start
				res[i] = b.hold(t, b.tok, adm, b.ev.ID, "key-1", b.ev.Seats[0], b.ev.Seats[1])
			})
		}
		close(start)
		wg.Wait()
		for i := range twins {
			require.Equal(t, http.StatusAccepted, res[i].status, "%s", res[i].body)
			require.JSONEq(t, string(b.first.body), string(res[i].body))
		}
		require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM orders"))
		require.EqualValues(t, 2, dbtest.Count(t, b.pool, "SELECT count(*) FROM outbox"))
	})

	t.Run("RetrySaysWhatBecameOfTheOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		orderID := b.first.json(t)["orderId"].(string)
		res := b.do(t, http.MethodPost, "/v1/orders/"+orderID+"/cancel", bearer(b.tok), nil)
		require.Equal(t, http.StatusOK, res.status, "%s", res.body)
		for _, adm := range []string{b.adm, b.expired} {
			again := b.hold(t, b.tok, adm, b.ev.ID, "key-1", b.ev.Seats[0], b.ev.Seats[1])
			require.Equal(t, http.StatusAccepted, again.status, "%s", again.body)
			body := again.json(t)
			require.Equal(t, orderID, body["orderId"])
			require.Equal(t, "canceled", body["status"])
		}
	})
}

// A hold without an Idempotency-Key is told which header is missing, not
// that its body is wrong.
func TestHoldWithoutIdempotencyKeyNamesTheHeader(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := b.createEvent(t, b.organizer(t))
	_, tok := b.buyer(t)
	res := b.do(t, http.MethodPost, "/v1/events/"+ev.ID+"/holds", map[string]string{
		"Authorization": "Bearer " + tok, "X-Admission-Token": b.admit(t, tok, ev.ID),
	}, map[string]any{"seatIds": []string{ev.Seats[0]}})
	require.Equal(t, http.StatusBadRequest, res.status, "%s", res.body)
	require.Equal(t, handlers.TypeMalformed, problemType(t, res))
	require.Equal(t, []any{map[string]any{"location": "header.Idempotency-Key", "message": "expected the header to be present"}},
		res.json(t)["errors"])
}
