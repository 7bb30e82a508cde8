package handlers_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"boxoffice/domain/waitingroom"
	"boxoffice/handlers"
	"boxoffice/testkit/dbtest"
)

// presaleEvent is an event with a Floor category of 3 seats and a Balcony
// category of 2, organized by org.
type presaleEvent struct {
	id                string
	floor, balcony    []string
	floorCat, balcCat string
}

func (b *roomBundle) presaleEvent(t *testing.T, org string) presaleEvent {
	t.Helper()
	res := b.do(t, http.MethodPost, "/v1/events", bearer(org), map[string]any{
		"name": "Presale", "startsAt": "2027-01-01T20:00:00Z", "currency": "eur",
		"categories": []map[string]any{{"name": "Floor", "priceMinor": 9000}, {"name": "Balcony", "priceMinor": 4000}},
		"sections": []map[string]any{
			{"name": "Stalls", "rows": 1, "seatsPerRow": 3, "priceMinor": 9000, "category": "Floor"},
			{"name": "Circle", "rows": 1, "seatsPerRow": 2, "priceMinor": 4000, "category": "Balcony"},
		},
	})
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	ev := presaleEvent{id: res.json(t)["id"].(string)}
	m := b.do(t, http.MethodGet, "/v1/events/"+ev.id+"/seats", nil, nil).json(t)
	for _, c := range m["categories"].([]any) {
		switch c.(map[string]any)["name"] {
		case "Floor":
			ev.floorCat = c.(map[string]any)["id"].(string)
		case "Balcony":
			ev.balcCat = c.(map[string]any)["id"].(string)
		}
	}
	for _, s := range m["seats"].([]any) {
		seat := s.(map[string]any)
		if seat["categoryId"] == ev.floorCat {
			ev.floor = append(ev.floor, seat["id"].(string))
		} else {
			ev.balcony = append(ev.balcony, seat["id"].(string))
		}
	}
	require.Len(t, ev.floor, 3)
	require.Len(t, ev.balcony, 2)
	return ev
}

func (b *roomBundle) setPhases(t *testing.T, org, eventID string, phases ...map[string]any) response {
	t.Helper()
	return b.do(t, http.MethodPut, "/v1/events/"+eventID+"/onsale/phases", bearer(org), map[string]any{"phases": phases})
}

func (b *roomBundle) createCodes(t *testing.T, org, eventID string, body map[string]any) []string {
	t.Helper()
	res := b.do(t, http.MethodPost, "/v1/events/"+eventID+"/onsale/presale-codes", bearer(org), body)
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	var codes []string
	for _, c := range res.json(t)["codes"].([]any) {
		codes = append(codes, b.remember(c.(map[string]any)["code"].(string)))
	}
	return codes
}

func (b *roomBundle) join(t *testing.T, buyer, eventID, code string) response {
	t.Helper()
	h := bearer(buyer)
	if code != "" {
		h["X-Presale-Code"] = code
	}
	return b.do(t, http.MethodPost, "/v1/events/"+eventID+"/waiting-room", h, nil)
}

// A presale through the API: joining needs a valid code with a use left
// (used once per buyer), holds in the presale sell only its categories,
// within the code's seats, and only to buyers who redeemed a code; the
// general sale that follows needs no code. Every response is checked
// against openapi.yaml (contract_test.go).
func TestPresaleThroughTheAPI(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{})
	org := b.organizerWithID(t)
	ev := b.presaleEvent(t, org)

	// Admitted before the organizer set up the presale, without a code.
	_, early := b.buyer(t)
	earlyAdm := b.admit(t, early, ev.id)

	now := time.Now().UTC()
	res := b.setPhases(t, org, ev.id,
		map[string]any{"name": "general", "opensAt": now.Add(time.Hour), "presale": false},
		map[string]any{"name": "presale", "opensAt": now.Add(-time.Hour), "presale": true, "categoryIds": []string{ev.floorCat}})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Equal(t, "presale", res.json(t)["current"])
	got := b.do(t, http.MethodGet, "/v1/events/"+ev.id+"/onsale/phases", bearer(org), nil)
	require.Equal(t, http.StatusOK, got.status, "%s", got.body)
	require.Len(t, got.json(t)["phases"], 2)
	other := b.organizerWithID(t)
	require.Equal(t, http.StatusNotFound, b.setPhases(t, other, ev.id).status, "another organizer's event does not exist")

	res = b.do(t, http.MethodPost, "/v1/events/"+ev.id+"/onsale/presale-codes", bearer(org),
		map[string]any{"phase": "general", "count": 1, "maxUses": 1, "maxSeats": 1})
	require.Equal(t, http.StatusUnprocessableEntity, res.status, "codes only for a presale: %s", res.body)
	codes := b.createCodes(t, org, ev.id, map[string]any{"phase": "presale", "count": 3, "maxUses": 2, "maxSeats": 2})
	require.Len(t, codes, 3)
	require.Equal(t, int64(0), dbtest.Count(t, b.pool, "SELECT count(*) FROM presale_codes WHERE code_hash = convert_to($1, 'UTF8')", codes[0]),
		"only a hash is stored")

	// The early buyer's admission does not let them hold in the presale.
	res = b.hold(t, early, earlyAdm, ev.id, uuid.NewString(), ev.floor[0])
	require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
	require.Equal(t, handlers.TypePresaleCodeRequired, problemType(t, res))

	_, a := b.buyer(t)
	for name, code := range map[string]string{"NoCode": "", "WrongCode": "NOTACODE0000"} {
		res = b.join(t, a, ev.id, code)
		require.Equal(t, http.StatusForbidden, res.status, "%s: %s", name, res.body)
		require.Equal(t, handlers.TypePresaleCodeRequired, problemType(t, res), name)
	}
	res = b.join(t, a, ev.id, codes[0])
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	admA := b.remember(res.json(t)["admissionToken"].(string))
	res = b.join(t, a, ev.id, codes[0])
	require.Equal(t, http.StatusOK, res.status, "joining again: %s", res.body)
	require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT sum(uses) FROM presale_codes"), "the same buyer uses a code once")

	res = b.hold(t, a, admA, ev.id, uuid.NewString(), ev.balcony[0])
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	require.Equal(t, handlers.TypePhaseCategory, problemType(t, res), "the presale sells Floor only")
	res = b.hold(t, a, admA, ev.id, uuid.NewString(), ev.floor[0], ev.floor[1])
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)

	// The code's second buyer finds its 2 seats taken by the first.
	_, bb := b.buyer(t)
	res = b.join(t, bb, ev.id, codes[0])
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	admB := b.remember(res.json(t)["admissionToken"].(string))
	res = b.hold(t, bb, admB, ev.id, uuid.NewString(), ev.floor[2])
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	require.Equal(t, handlers.TypePresaleSeatLimit, problemType(t, res))

	// The code has no use left.
	_, c := b.buyer(t)
	res = b.join(t, c, ev.id, codes[0])
	require.Equal(t, http.StatusForbidden, res.status, "%s", res.body)
	require.Equal(t, handlers.TypePresaleCodeRequired, problemType(t, res))

	// Leaving out a phase with codes is refused; then the general sale
	// opens: no code, every category.
	res = b.setPhases(t, org, ev.id, map[string]any{"name": "general", "opensAt": now.Add(-time.Minute), "presale": false})
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	res = b.setPhases(t, org, ev.id,
		map[string]any{"name": "presale", "opensAt": now.Add(-time.Hour), "presale": true, "categoryIds": []string{ev.floorCat}},
		map[string]any{"name": "general", "opensAt": now.Add(-time.Minute), "presale": false})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Equal(t, "general", res.json(t)["current"])
	res = b.join(t, c, ev.id, "")
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	res = b.hold(t, c, b.remember(res.json(t)["admissionToken"].(string)), ev.id, uuid.NewString(), ev.balcony[0])
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
	res = b.hold(t, early, earlyAdm, ev.id, uuid.NewString(), ev.floor[2])
	require.Equal(t, http.StatusAccepted, res.status, "general sale: %s", res.body)
}

// Buyers racing for a code's uses: 12 buyers join at once, in real
// goroutines, with one code of 3 uses; exactly 3 are admitted, the code
// records 3 uses, and 3 redemptions. The same buyer joining 6 times at
// once with another code uses it once.
func TestPresaleCodeLastUseRace(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{limits: waitingroom.Limits{PerUser: -1, PerIP: -1}})
	org := b.organizerWithID(t)
	ev := b.presaleEvent(t, org)
	res := b.setPhases(t, org, ev.id, map[string]any{"name": "presale", "opensAt": time.Now().Add(-time.Hour), "presale": true})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	codes := b.createCodes(t, org, ev.id, map[string]any{"phase": "presale", "codes": []string{"fan-club-1", "fan-club-2"}, "maxUses": 3, "maxSeats": 8})
	require.Equal(t, []string{"FAN-CLUB-1", "FAN-CLUB-2"}, codes)

	joinAll := func(buyers []string, code string) map[int]int {
		statuses := make([]int, len(buyers))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, buyer := range buyers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, b.srv.URL+"/v1/events/"+ev.id+"/waiting-room", nil)
				if err != nil {
					return
				}
				req.Header.Set("Authorization", "Bearer "+buyer)
				req.Header.Set("X-Presale-Code", code)
				r, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				_ = r.Body.Close()
				statuses[i] = r.StatusCode
			}()
		}
		close(start)
		wg.Wait()
		counts := map[int]int{}
		for _, s := range statuses {
			if s == http.StatusAccepted { // queued: joined all the same
				s = http.StatusOK
			}
			counts[s]++
		}
		return counts
	}

	var buyers []string
	for range 12 {
		_, tok := b.buyer(t)
		buyers = append(buyers, tok)
	}
	counts := joinAll(buyers, "fan-club-1")
	require.Equal(t, map[int]int{http.StatusOK: 3, http.StatusForbidden: 9}, counts)
	require.Equal(t, int64(3), dbtest.Count(t, b.pool, "SELECT uses FROM presale_codes WHERE max_uses = 3 ORDER BY id LIMIT 1"))
	require.Equal(t, int64(3), dbtest.Count(t, b.pool, "SELECT count(*) FROM presale_redemptions r JOIN presale_codes c ON c.id = r.code_id WHERE c.uses = 3"))

	// Two buyers on a code's last use: exactly one gets it.
	b.createCodes(t, org, ev.id, map[string]any{"phase": "presale", "codes": []string{"last-use"}, "maxUses": 1, "maxSeats": 2})
	_, x := b.buyer(t)
	_, y := b.buyer(t)
	require.Equal(t, map[int]int{http.StatusOK: 1, http.StatusForbidden: 1}, joinAll([]string{x, y}, "last-use"))

	_, same := b.buyer(t)
	counts = joinAll([]string{same, same, same, same, same, same}, "FAN-CLUB-2")
	require.Equal(t, map[int]int{http.StatusOK: 6}, counts)
	require.Equal(t, int64(1), dbtest.Count(t, b.pool, "SELECT uses FROM presale_codes WHERE max_uses = 3 AND uses < 3"), "one buyer, one use")
}

// Two buyers of one code hold at once, in real goroutines, 2 seats each
// against the code's 3: the code lock in hold_reserve makes them take
// turns, so exactly one hold succeeds and the other is refused
// presale-seat-limit.
func TestPresaleCodeSeatLimitRace(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{})
	org := b.organizerWithID(t)
	ev := b.presaleEvent(t, org)
	res := b.setPhases(t, org, ev.id, map[string]any{"name": "presale", "opensAt": time.Now().Add(-time.Hour), "presale": true})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	code := b.createCodes(t, org, ev.id, map[string]any{"phase": "presale", "count": 1, "maxUses": 2, "maxSeats": 3})[0]
	type buyer struct{ bearer, adm string }
	var buyers []buyer
	for range 2 {
		_, tok := b.buyer(t)
		r := b.join(t, tok, ev.id, code)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		buyers = append(buyers, buyer{tok, b.remember(r.json(t)["admissionToken"].(string))})
	}
	seats := [][]string{{ev.floor[0], ev.floor[1]}, {ev.balcony[0], ev.balcony[1]}}
	statuses := make([]int, 2)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, by := range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			body := `{"seatIds":["` + seats[i][0] + `","` + seats[i][1] + `"]}`
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, b.srv.URL+"/v1/events/"+ev.id+"/holds", strings.NewReader(body))
			if err != nil {
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+by.bearer)
			req.Header.Set("X-Admission-Token", by.adm)
			req.Header.Set("Idempotency-Key", uuid.NewString())
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			_ = r.Body.Close()
			statuses[i] = r.StatusCode
		}()
	}
	close(start)
	wg.Wait()
	require.ElementsMatch(t, []int{http.StatusAccepted, http.StatusConflict}, statuses)
	require.Equal(t, int64(2), dbtest.Count(t, b.pool, "SELECT count(*) FROM hold_seats WHERE released_at IS NULL"), "one hold of 2 seats, within the code's 3")
}

// Guessing presale codes goes no faster than the buyer's request budget:
// a presale join is charged before its code is looked at, so past the
// budget a guess is a 429 (it was a 403 for every guess, at whatever
// rate, when the budget was charged only after the code was accepted),
// and a guess that was charged costs the buyer what one join does.
func TestPresaleCodeGuessesAreRateLimited(t *testing.T) {
	t.Parallel()
	const perUser = 3
	reg := prometheus.NewRegistry()
	b := setupRoom(t, roomOpts{limits: waitingroom.Limits{PerUser: perUser, PerIP: -1}, reg: reg})
	org := b.organizerWithID(t)
	ev := b.presaleEvent(t, org)
	res := b.setPhases(t, org, ev.id,
		map[string]any{"name": "presale", "opensAt": time.Now().UTC().Add(-time.Hour), "presale": true})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	codes := b.createCodes(t, org, ev.id, map[string]any{"phase": "presale", "count": 1, "maxUses": 5, "maxSeats": 2})

	_, guesser := b.buyer(t)
	start := time.Now()
	var refused, limited int
	for range 4 * perUser {
		res := b.join(t, guesser, ev.id, "WRONGCODE000")
		switch res.status {
		case http.StatusForbidden:
			require.Equal(t, handlers.TypePresaleCodeRequired, problemType(t, res))
			refused++
		case http.StatusTooManyRequests:
			require.NotEmpty(t, res.header.Get("Retry-After"))
			limited++
		default:
			t.Fatalf("a wrong code answered %d: %s", res.status, res.body)
		}
	}
	// Each second's window admits perUser requests; the loop may span more
	// than one.
	windows := int(time.Since(start)/time.Second) + 2
	require.LessOrEqual(t, refused, perUser*windows, "guesses looked at")
	require.Positive(t, limited, "guesses past the budget are refused before the code is checked")

	// A buyer with the right code still joins with one unit of its budget.
	_, buyer := b.buyer(t)
	res = b.join(t, buyer, ev.id, codes[0])
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	require.Equal(t, `"waiting-room";r=2;t=1`, res.header.Get("RateLimit"), "one join, one unit")
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var requests float64
	for _, mf := range mfs {
		if mf.GetName() == "boxoffice_waitingroom_requests_total" {
			for _, m := range mf.GetMetric() {
				requests += m.GetCounter().GetValue()
			}
		}
	}
	require.Equal(t, float64(4*perUser+1), requests, "each join counted once, a presale join's charge included")
}

// Presale codes are shown once, so creating them takes an optional
// Idempotency-Key with the holds' semantics: concurrent retries of a lost
// answer, released together, create one batch and all get its codes; a
// later retry gets them again; the same key with another body is 409
// idempotency-conflict; the answer kept for retries is sealed (no code in
// clear); and a failed request binds no key.
func TestPresaleCodesRetriedWithIdempotencyKey(t *testing.T) {
	t.Parallel()
	b := setupRoom(t, roomOpts{secrets: true})
	org := b.organizerWithID(t)
	ev := b.presaleEvent(t, org)
	path := "/v1/events/" + ev.id + "/onsale/presale-codes"
	with := func(key string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + org, "Idempotency-Key": key}
	}
	body := map[string]any{"phase": "presale", "count": 5, "maxUses": 2, "maxSeats": 2}

	// Before the phase exists the request fails, and the key stays free.
	res := b.do(t, http.MethodPost, path, with("codes-1"), body)
	require.Equal(t, http.StatusUnprocessableEntity, res.status, "%s", res.body)
	res = b.setPhases(t, org, ev.id, map[string]any{"name": "presale", "opensAt": time.Now().UTC().Add(-time.Hour), "presale": true})
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)

	const twins = 6
	answers := make([]response, twins)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range twins {
		wg.Go(func() {
			<-start
			answers[i] = b.do(t, http.MethodPost, path, with("codes-1"), body)
		})
	}
	close(start)
	wg.Wait()
	for i := range twins {
		require.Equal(t, http.StatusCreated, answers[i].status, "%s", answers[i].body)
		require.JSONEq(t, string(answers[0].body), string(answers[i].body), "every retry gets the first answer")
	}
	var codes []string
	for _, c := range answers[0].json(t)["codes"].([]any) {
		codes = append(codes, b.remember(c.(map[string]any)["code"].(string)))
	}
	require.Len(t, codes, 5)
	require.EqualValues(t, 5, dbtest.Count(t, b.pool, "SELECT count(*) FROM presale_codes"), "one batch, however many retries")

	again := b.do(t, http.MethodPost, path, with("codes-1"), body)
	require.Equal(t, http.StatusCreated, again.status, "%s", again.body)
	require.JSONEq(t, string(answers[0].body), string(again.body))
	// The kept answer is sealed: no code is in it in clear.
	for _, c := range codes {
		require.EqualValues(t, 0, dbtest.Count(t, b.pool,
			"SELECT count(*) FROM idempotent_requests WHERE NOT sealed OR position(convert_to($1, 'UTF8') in response) > 0", c))
	}

	res = b.do(t, http.MethodPost, path, with("codes-1"), map[string]any{"phase": "presale", "count": 6, "maxUses": 2, "maxSeats": 2})
	require.Equal(t, http.StatusConflict, res.status, "%s", res.body)
	require.Equal(t, handlers.TypeIdempotencyConflict, problemType(t, res))
	require.EqualValues(t, 5, dbtest.Count(t, b.pool, "SELECT count(*) FROM presale_codes"))

	// A replayed code admits as a created one does.
	_, buyer := b.buyer(t)
	require.Equal(t, http.StatusOK, b.join(t, buyer, ev.id, codes[0]).status)
}
