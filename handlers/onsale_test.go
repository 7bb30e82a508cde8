package handlers_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
)

// Only the event's organizer sees and changes its onsale; a new event's
// onsale is open, and the state shows R and the reason for its last change.
func TestOnsaleOrganizerOnly(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{rate: 150})
	org := b.organizerWithID(t)
	ev := b.createEvent(t, org)
	path := "/v1/events/" + ev.ID + "/onsale"

	res := b.do(t, http.MethodGet, path, bearer(org), nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	body := res.json(t)
	require.Equal(t, "open", body["phase"], "a new event's onsale is open")
	require.EqualValues(t, 150, body["admissionRate"])
	require.Equal(t, "initial", body["rateReason"])
	require.EqualValues(t, 0, body["queued"])

	res = b.do(t, http.MethodGet, path, bearer(b.organizer(t)), nil)
	require.Equal(t, http.StatusNotFound, res.status, "another organizer: %s", res.body)
	res = b.do(t, http.MethodPatch, path, bearer(b.organizer(t)), map[string]any{"paused": true})
	require.Equal(t, http.StatusNotFound, res.status, "another organizer: %s", res.body)
	_, buyer := b.buyer(t)
	res = b.do(t, http.MethodGet, path, bearer(buyer), nil)
	require.Equal(t, http.StatusForbidden, res.status, "a buyer: %s", res.body)

	opens := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	res = b.do(t, http.MethodPatch, path, bearer(org), map[string]any{"maxRate": 40, "seatLimit": 4, "opensAt": opens})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	body = res.json(t)
	require.Equal(t, "scheduled", body["phase"])
	require.EqualValues(t, 40, body["admissionRate"], "the organizer's cap")
	require.EqualValues(t, 150, body["controllerRate"])
	require.EqualValues(t, 4, body["seatLimit"])
	require.Equal(t, opens.Format(time.RFC3339), body["opensAt"])

	// Before the opening buyers are queued in the pre-queue, not admitted.
	res = b.do(t, http.MethodPost, "/v1/events/"+ev.ID+"/waiting-room", bearer(buyer), nil)
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	require.Equal(t, "scheduled", res.json(t)["phase"])

	res = b.do(t, http.MethodPatch, path, bearer(org), map[string]any{"opensAt": time.Now().Add(-time.Second)})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Equal(t, "open", res.json(t)["phase"])
	require.EqualValues(t, 1, res.json(t)["queued"])
}

// The per-buyer seat limit is enforced on holds: a hold that would take the
// buyer over it is a 409 seat-limit; a retry of a hold that passed is not.
func TestHoldSeatLimit(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{})
	org := b.organizerWithID(t)
	ev := b.createEvent(t, org)
	res := b.do(t, http.MethodPatch, "/v1/events/"+ev.ID+"/onsale", bearer(org), map[string]any{"seatLimit": 3})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)

	_, tok := b.buyer(t)
	adm := b.admit(t, tok, ev.ID)
	require.Equal(t, http.StatusAccepted, b.hold(t, tok, adm, ev.ID, "a", ev.Seats[0], ev.Seats[1]).status)
	res = b.hold(t, tok, adm, ev.ID, "b", ev.Seats[2], ev.Seats[3])
	require.Equal(t, http.StatusConflict, res.status, "2 + 2 > 3: %s", res.body)
	require.Equal(t, handlers.TypeSeatLimit, problemType(t, res))
	res = b.hold(t, tok, adm, ev.ID, "c", ev.Seats[0], ev.Seats[1], ev.Seats[2], ev.Seats[3])
	require.Equal(t, http.StatusConflict, res.status, "more than the limit in one hold: %s", res.body)
	require.Equal(t, http.StatusAccepted, b.hold(t, tok, adm, ev.ID, "a", ev.Seats[0], ev.Seats[1]).status, "a retry does not count against itself")
	require.Equal(t, http.StatusAccepted, b.hold(t, tok, adm, ev.ID, "d", ev.Seats[2]).status, "2 + 1 = 3")

	_, other := b.buyer(t)
	require.Equal(t, http.StatusAccepted, b.hold(t, other, b.admit(t, other, ev.ID), ev.ID, "a", ev.Seats[4], ev.Seats[5], ev.Seats[6]).status,
		"the limit is per buyer")
}

// The organizer revokes a buyer's admission through the API: the buyer's
// token is refused on holds (403), another buyer's is not; a buyer without
// an admission is a 404, and another organizer cannot revoke.
func TestRevokeAdmission(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{})
	org := b.organizerWithID(t)
	ev := b.createEvent(t, org)
	userID, tok := b.buyer(t)
	adm := b.admit(t, tok, ev.ID)
	_, otherTok := b.buyer(t)
	otherAdm := b.admit(t, otherTok, ev.ID)
	path := "/v1/events/" + ev.ID + "/onsale/revocations"

	res := b.do(t, http.MethodPost, path, bearer(b.organizer(t)), map[string]any{"userId": userID})
	require.Equal(t, http.StatusNotFound, res.status, "another organizer: %s", res.body)
	res = b.do(t, http.MethodPost, path, bearer(org), map[string]any{"userId": uuid.New()})
	require.Equal(t, http.StatusNotFound, res.status, "no admission: %s", res.body)
	res = b.do(t, http.MethodPost, path, bearer(org), map[string]any{"userId": userID})
	require.Equal(t, http.StatusNoContent, res.status, "%s", res.body)

	res = b.hold(t, tok, adm, ev.ID, "k", ev.Seats[0])
	require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
	require.Equal(t, handlers.TypeAdmissionInvalid, problemType(t, res))
	require.Equal(t, http.StatusAccepted, b.hold(t, otherTok, otherAdm, ev.ID, "k", ev.Seats[0]).status)
}

// Revoking is idempotent by nature (its description says so; it takes no
// Idempotency-Key): revocations of one buyer sent at once, as retries of a
// lost answer, all answer 204, and the buyer's token stays refused.
func TestRevokeAdmissionRetried(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{})
	org := b.organizerWithID(t)
	ev := b.createEvent(t, org)
	userID, tok := b.buyer(t)
	adm := b.admit(t, tok, ev.ID)
	path := "/v1/events/" + ev.ID + "/onsale/revocations"

	const retries = 6
	res := make([]response, retries)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range retries {
		wg.Go(func() {
			<-start
			res[i] = b.do(t, http.MethodPost, path, bearer(org), map[string]any{"userId": userID})
		})
	}
	close(start)
	wg.Wait()
	for _, r := range res {
		require.Equal(t, http.StatusNoContent, r.status, "%s", r.body)
	}
	again := b.do(t, http.MethodPost, path, bearer(org), map[string]any{"userId": userID})
	require.Equal(t, http.StatusNoContent, again.status, "a later retry: %s", again.body)
	res[0] = b.hold(t, tok, adm, ev.ID, "k", ev.Seats[0])
	require.Equal(t, http.StatusForbidden, res[0].status, "%s", res[0].body)
	require.Equal(t, handlers.TypeAdmissionInvalid, problemType(t, res[0]))
}

// The organizer sets the event's hold lifetime within bounds; holds made
// after it last that long.
func TestHoldLifetimePerEvent(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{})
	org := b.organizerWithID(t)
	ev := b.createEvent(t, org)
	path := "/v1/events/" + ev.ID + "/onsale"
	for _, bad := range []int{30, 1801, -1} {
		res := b.do(t, http.MethodPatch, path, bearer(org), map[string]any{"holdTtlSeconds": bad})
		require.Equal(t, http.StatusUnprocessableEntity, res.status, "%d: %s", bad, res.body)
	}
	res := b.do(t, http.MethodPatch, path, bearer(org), map[string]any{"holdTtlSeconds": 120, "paymentAttempts": 5})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.EqualValues(t, 120, res.json(t)["holdTtlSeconds"])
	require.EqualValues(t, 5, res.json(t)["paymentAttempts"])

	_, tok := b.buyer(t)
	res = b.hold(t, tok, b.admit(t, tok, ev.ID), ev.ID, "a", ev.Seats[0])
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	expires, err := time.Parse(time.RFC3339Nano, res.json(t)["expiresAt"].(string))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now().Add(2*time.Minute), expires, 30*time.Second)

	res = b.do(t, http.MethodPatch, path, bearer(org), map[string]any{"holdTtlSeconds": 0, "paymentAttempts": 0})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.EqualValues(t, 0, res.json(t)["holdTtlSeconds"], "0: the deployment's default")
	require.EqualValues(t, 3, res.json(t)["paymentAttempts"], "the default")
}
