package handlers_test

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"boxoffice/domain/tickets"
	"boxoffice/handlers"
	"boxoffice/platform/auth"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/fixture"
)

// doorBundle is an API whose cell has a door, an organizer with an event
// of seats ticketed seats, and their QR payloads.
type doorBundle struct {
	*testBundle
	orgID    uuid.UUID
	orgToken string
	scanner  string // a scanner token of the organizer
	signer   *tickets.Signer
	eventID  string
	ticketID []uuid.UUID
	payload  []string
}

func setupDoor(t *testing.T, seats int) *doorBundle {
	t.Helper()
	seed, err := tickets.GenerateSeed()
	require.NoError(t, err)
	signer, err := tickets.NewSigner(seed)
	require.NoError(t, err)
	pool := dbtest.New(t)
	b := &doorBundle{signer: signer, testBundle: setupPool(t, pool, func(cfg *handlers.Config) {
		cellOf(cfg).Door = tickets.NewDoor(pool, signer.PublicKey())
	})}
	b.orgToken, b.orgID = b.organizerOf(t)
	b.scanner = b.token(t, auth.Identity{UserID: uuid.New(), Role: auth.RoleScanner, OrganizerID: b.orgID})
	ev := fixture.NewEvent(t, pool, fixture.EventSpec{OrganizerID: b.orgID, SeatsPerRow: seats})
	b.eventID = ev.ID.String()
	b.ticketID, b.payload = fixture.Ticketed(t, pool, signer, ev)
	return b
}

func (b *doorBundle) scan(t *testing.T, tok, payload, gate string) response {
	t.Helper()
	return b.scanAt(t, b.eventID, tok, payload, gate)
}

// scanAt scans payload at the door of the event eventID.
func (b *doorBundle) scanAt(t *testing.T, eventID, tok, payload, gate string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/events/"+eventID+"/check-ins", bearer(tok), map[string]any{"qrPayload": payload, "gate": gate})
}

// batch uploads scans as an offline scanner and returns the results.
func (b *doorBundle) batch(t *testing.T, scans ...map[string]any) []map[string]any {
	t.Helper()
	r := b.do(t, http.MethodPost, "/v1/events/"+b.eventID+"/check-ins/batch", bearer(b.scanner), map[string]any{"scans": scans})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var out []map[string]any
	for _, raw := range r.json(t)["results"].([]any) {
		out = append(out, raw.(map[string]any))
	}
	require.Len(t, out, len(scans))
	return out
}

// Twenty scanners scan one ticket at once: exactly one lets it in, and
// every other learns when and where it was first used.
func TestCheckInFirstScanWins(t *testing.T) {
	t.Parallel()
	b := setupDoor(t, 3)
	const scanners = 20
	res := make([]response, scanners)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range scanners {
		wg.Go(func() {
			<-start
			res[i] = b.scan(t, b.scanner, b.payload[0], fmt.Sprintf("gate-%d", i))
		})
	}
	close(start)
	wg.Wait()

	var winner map[string]any
	for _, r := range res {
		if r.status == http.StatusCreated {
			require.Nil(t, winner, "a second scan was accepted")
			winner = r.json(t)
		}
	}
	require.NotNil(t, winner, "no scan was accepted")
	require.Equal(t, b.ticketID[0].String(), winner["ticketId"])
	for _, r := range res {
		if r.status == http.StatusCreated {
			continue
		}
		require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
		require.Equal(t, handlers.TypeAlreadyCheckedIn, problemType(t, r))
		first := r.json(t)["checkIn"].(map[string]any)
		require.Equal(t, winner["gate"], first["gate"])
		require.Equal(t, winner["scannedAt"], first["scannedAt"])
	}
	require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM check_ins"))

	counts := b.do(t, http.MethodGet, "/v1/events/"+b.eventID+"/check-ins", bearer(b.orgToken), nil)
	require.Equal(t, http.StatusOK, counts.status, "%s", counts.body)
	require.EqualValues(t, 1, counts.json(t)["total"])
}

// A revoked ticket is refused at the door; a payload that is not a signed
// ticket of this event is invalid; nothing is recorded for either.
func TestCheckInRefusesRevokedAndInvalid(t *testing.T) {
	t.Parallel()
	b := setupDoor(t, 3)
	dbtest.Exec(t, b.pool, "UPDATE tickets SET revoked_at = now() WHERE id = $1", b.ticketID[1])
	r := b.scan(t, b.scanner, b.payload[1], "north")
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	require.Equal(t, handlers.TypeTicketRevoked, problemType(t, r))

	other, err := tickets.GenerateSeed()
	require.NoError(t, err)
	forger, err := tickets.NewSigner(other)
	require.NoError(t, err)
	forged := forger.Sign(tickets.Ticket{ID: uuid.New(), OrderID: uuid.New(), SeatID: uuid.New(), EventID: uuid.MustParse(b.eventID), IssuedAt: time.Now()})
	// One character of the signature changed, to another: replacing the
	// last two with "AA" left the signature as it was when they decoded
	// to the same bits (one run in 256 or so).
	tampered := []byte(b.payload[2])
	if i := len(tampered) - 10; tampered[i] == 'A' {
		tampered[i] = 'B'
	} else {
		tampered[i] = 'A'
	}
	for _, p := range []string{forged, "BX1.garbage.more", string(tampered)} {
		r := b.scan(t, b.scanner, p, "north")
		require.Equal(t, http.StatusUnprocessableEntity, r.status, "%s", r.body)
		require.Equal(t, handlers.TypeTicketInvalid, problemType(t, r))
	}
	require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM check_ins"))
}

// Only the event's organizer and their scanners reach its door: another
// organizer's scanner, or a buyer, gets nothing and writes nothing.
func TestCheckInIsTheOrganizers(t *testing.T) {
	t.Parallel()
	b := setupDoor(t, 2)
	_, strangerOrg := b.organizerOf(t)
	stranger := b.token(t, auth.Identity{UserID: uuid.New(), Role: auth.RoleScanner, OrganizerID: strangerOrg})
	r := b.scan(t, stranger, b.payload[0], "north")
	require.Equal(t, http.StatusNotFound, r.status, "%s", r.body)
	counts := b.do(t, http.MethodGet, "/v1/events/"+b.eventID+"/check-ins", bearer(stranger), nil)
	require.Equal(t, http.StatusNotFound, counts.status, "%s", counts.body)
	_, buyer := b.buyer(t)
	require.Equal(t, http.StatusForbidden, b.scan(t, buyer, b.payload[0], "north").status)
	require.Equal(t, http.StatusUnauthorized, b.do(t, http.MethodPost, "/v1/events/"+b.eventID+"/check-ins", nil,
		map[string]any{"qrPayload": b.payload[0], "gate": "north"}).status)
	// A scanner's token is good for the door only.
	require.Equal(t, http.StatusForbidden, b.do(t, http.MethodGet, "/v1/events/"+b.eventID+"/sales", bearer(b.scanner), nil).status)
	require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM check_ins"))
}

// An offline scanner uploads 1,000 scans, 100 of them second scans of a
// ticket: 900 are let in, and each of the 100 is reported with the scan
// that won (the earliest of the batch).
func TestCheckInBatch(t *testing.T) {
	t.Parallel()
	b := setupDoor(t, 900)
	base := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	var scans []map[string]any
	for i, p := range b.payload {
		scans = append(scans, map[string]any{"qrPayload": p, "gate": "east", "scannedAt": base.Add(time.Duration(i) * time.Second)})
	}
	for i := range 100 {
		// A later scan of ticket i at another gate, listed first.
		scans = append([]map[string]any{{"qrPayload": b.payload[i], "gate": "west", "scannedAt": base.Add(time.Duration(i)*time.Second + time.Minute)}}, scans...)
	}
	require.Len(t, scans, 1000)
	r := b.do(t, http.MethodPost, "/v1/events/"+b.eventID+"/check-ins/batch", bearer(b.scanner), map[string]any{"scans": scans})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	results := r.json(t)["results"].([]any)
	require.Len(t, results, 1000)
	outcomes := map[string]int{}
	for i, raw := range results {
		res := raw.(map[string]any)
		outcomes[res["outcome"].(string)]++
		if res["outcome"] == "duplicate" {
			require.Less(t, i, 100, "only the late scans are duplicates")
			require.Equal(t, "east", res["checkIn"].(map[string]any)["gate"], "the earliest scan won")
		}
	}
	require.Equal(t, map[string]int{"accepted": 900, "duplicate": 100}, outcomes)
	require.EqualValues(t, 900, dbtest.Count(t, b.pool, "SELECT count(*) FROM check_ins"))

	// The same upload again changes nothing: every scan is a duplicate.
	r = b.do(t, http.MethodPost, "/v1/events/"+b.eventID+"/check-ins/batch", bearer(b.scanner), map[string]any{"scans": scans})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	for _, raw := range r.json(t)["results"].([]any) {
		require.Equal(t, "duplicate", raw.(map[string]any)["outcome"])
	}
	require.EqualValues(t, 900, dbtest.Count(t, b.pool, "SELECT count(*) FROM check_ins"))

	counts := b.do(t, http.MethodGet, "/v1/events/"+b.eventID+"/check-ins", bearer(b.orgToken), nil)
	require.Equal(t, http.StatusOK, counts.status, "%s", counts.body)
	body := counts.json(t)
	require.EqualValues(t, 900, body["total"])
	require.Equal(t, "east", body["gates"].([]any)[0].(map[string]any)["gate"])
}

// A payload signed with the signing key that names this event but carries
// a ticket of another event of the same organizer is refused at this
// door, singly and in a batch, and uses nothing up: the ticket's order
// decides its event, not the payload. The ticket still gets in at its own
// event's door.
func TestCheckInRefusesAnotherEventsTicket(t *testing.T) {
	t.Parallel()
	b := setupDoor(t, 2)
	other := fixture.NewEvent(t, b.pool, fixture.EventSpec{OrganizerID: b.orgID, SeatsPerRow: 1})
	otherIDs, otherPayloads := fixture.Ticketed(t, b.pool, b.signer, other)
	tk, err := tickets.Verify(b.signer.PublicKey(), otherPayloads[0])
	require.NoError(t, err)
	tk.EventID = uuid.MustParse(b.eventID)
	misnamed := b.signer.Sign(tk)

	r := b.scan(t, b.scanner, misnamed, "north")
	require.Equal(t, http.StatusUnprocessableEntity, r.status, "%s", r.body)
	require.Equal(t, handlers.TypeTicketInvalid, problemType(t, r))
	res := b.batch(t, map[string]any{"qrPayload": misnamed, "gate": "north", "scannedAt": time.Now().Add(-time.Minute)})
	require.Equal(t, "invalid", res[0]["outcome"])
	require.Nil(t, res[0]["checkIn"], "nothing of the other event's door is shown")
	require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM check_ins"))

	r = b.scanAt(t, other.ID.String(), b.scanner, otherPayloads[0], "south")
	require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
	require.EqualValues(t, 1, dbtest.Count(t, b.pool, "SELECT count(*) FROM check_ins WHERE ticket_id = $1 AND event_id = $2", otherIDs[0], other.ID))
}

// Offline scan times are bounded by the ticket's issue and the server's
// now, give or take tickets.MaxClockSkew: a scan out of range records
// nothing, so a backdated scan does not win the first-scan race and no
// gate's last scan lies in the future, while the rest of the batch goes
// on.
func TestCheckInScanTimes(t *testing.T) {
	t.Parallel()

	t.Run("BatchRecordsOnlyScansInRange", func(t *testing.T) {
		t.Parallel()
		b := setupDoor(t, 3)
		tk, err := tickets.Verify(b.signer.PublicKey(), b.payload[0])
		require.NoError(t, err)
		issued := tk.IssuedAt
		honest := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
		slow := issued.Add(-tickets.MaxClockSkew / 2) // a scanner a little slow, just after the sale
		res := b.batch(t,
			map[string]any{"qrPayload": b.payload[0], "gate": "backdated", "scannedAt": time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)},
			map[string]any{"qrPayload": b.payload[0], "gate": "east", "scannedAt": honest},
			map[string]any{"qrPayload": b.payload[1], "gate": "future", "scannedAt": time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)},
			map[string]any{"qrPayload": b.payload[2], "gate": "before-sale", "scannedAt": issued.Add(-tickets.MaxClockSkew - time.Second)},
			map[string]any{"qrPayload": b.payload[2], "gate": "slow-clock", "scannedAt": slow},
		)
		var outcomes []any
		for _, r := range res {
			outcomes = append(outcomes, r["outcome"])
		}
		require.Equal(t, []any{"scanned-at-out-of-range", "accepted", "scanned-at-out-of-range", "scanned-at-out-of-range", "accepted"}, outcomes)
		require.Equal(t, b.ticketID[0].String(), res[0]["ticketId"], "an out-of-range scan names its ticket")
		require.Nil(t, res[0]["checkIn"])
		require.Equal(t, "east", res[1]["checkIn"].(map[string]any)["gate"], "the backdated scan did not win")

		require.EqualValues(t, 2, dbtest.Count(t, b.pool, "SELECT count(*) FROM check_ins"))
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM check_ins WHERE ticket_id = $1", b.ticketID[1]))
		counts := b.do(t, http.MethodGet, "/v1/events/"+b.eventID+"/check-ins", bearer(b.orgToken), nil)
		require.Equal(t, http.StatusOK, counts.status, "%s", counts.body)
		for _, g := range counts.json(t)["gates"].([]any) {
			last, err := time.Parse(time.RFC3339Nano, g.(map[string]any)["lastScannedAt"].(string))
			require.NoError(t, err)
			require.False(t, last.After(time.Now()), "gate %v's last scan is in the future", g)
		}

		// The ticket the far-future scan named is still unused.
		require.Equal(t, http.StatusCreated, b.scan(t, b.scanner, b.payload[1], "north").status)
	})

	t.Run("SingleScanOfATicketIssuedAfterNowIs422", func(t *testing.T) {
		t.Parallel()
		b := setupDoor(t, 1)
		// As if the issuing worker's clock ran an hour ahead of this one.
		dbtest.Exec(t, b.pool, "UPDATE tickets SET issued_at = now() + interval '1 hour' WHERE id = $1", b.ticketID[0])
		r := b.scan(t, b.scanner, b.payload[0], "north")
		require.Equal(t, http.StatusUnprocessableEntity, r.status, "%s", r.body)
		require.Equal(t, handlers.TypeScannedAtOutOfRange, problemType(t, r))
		require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM check_ins"))
	})
}

// Offline scanners refresh the revocation list: the organizer's scanners
// read it, another organizer's scanner finds no such event (as another
// organizer does), and a buyer may not ask.
func TestRevokedTicketsForScanners(t *testing.T) {
	t.Parallel()
	b := setupDoor(t, 2)
	dbtest.Exec(t, b.pool, "UPDATE tickets SET revoked_at = now() WHERE id = $1", b.ticketID[1])
	list := "/v1/events/" + b.eventID + "/revoked-tickets"
	r := b.do(t, http.MethodGet, list, bearer(b.scanner), nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	revoked := r.json(t)["tickets"].([]any)
	require.Len(t, revoked, 1)
	require.Equal(t, b.ticketID[1].String(), revoked[0].(map[string]any)["id"])

	_, strangerOrg := b.organizerOf(t)
	stranger := b.token(t, auth.Identity{UserID: uuid.New(), Role: auth.RoleScanner, OrganizerID: strangerOrg})
	for name, tok := range map[string]string{"Scanner": stranger, "Organizer": b.organizer(t)} {
		r := b.do(t, http.MethodGet, list, bearer(tok), nil)
		require.Equal(t, http.StatusNotFound, r.status, "another organizer's %s: %s", name, r.body)
		require.Equal(t, handlers.TypeNotFound, problemType(t, r))
	}
	_, buyer := b.buyer(t)
	require.Equal(t, http.StatusForbidden, b.do(t, http.MethodGet, list, bearer(buyer), nil).status)
}

// A scanner's token opens the door and nothing else: every operation of
// openapi.yaml that takes a bearer token answers it 403, before reading
// any input, except the door's four. A new organizer operation is covered
// without touching this test.
func TestScannerTokenIsForTheDoorOnly(t *testing.T) {
	t.Parallel()
	b := setupDoor(t, 1)
	door := map[string]bool{"check-in": true, "check-in-batch": true, "count-check-ins": true, "list-revoked-tickets": true}
	raw, err := os.ReadFile("../openapi.yaml")
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]any `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	param := regexp.MustCompile(`\{[^}]+\}`)
	reached := map[string]bool{}
	for path, item := range doc.Paths {
		for method, v := range item {
			op, ok := v.(map[string]any)
			if !ok || method == "parameters" {
				continue
			}
			id := op["operationId"].(string)
			security, _ := op["security"].([]any)
			if len(security) == 0 {
				continue // public
			}
			if op["x-test-mode-only"] == true {
				continue // served only with the sandbox, which this server has not
			}
			url := param.ReplaceAllStringFunc(path, func(p string) string {
				if p == "{eventId}" {
					return b.eventID
				}
				return uuid.NewString()
			})
			r := b.do(t, strings.ToUpper(method), url, bearer(b.scanner), nil)
			if door[id] {
				reached[id] = true
				require.NotEqual(t, http.StatusForbidden, r.status, "%s: the door's operation refused a scanner: %s", id, r.body)
				continue
			}
			require.Equal(t, http.StatusForbidden, r.status, "%s %s (%s) is not the door's, yet a scanner got: %s", method, path, id, r.body)
			require.Equal(t, handlers.TypeForbidden, problemType(t, r))
		}
	}
	require.Len(t, reached, len(door), "the door's operations are all in openapi.yaml")
	require.Zero(t, dbtest.Count(t, b.pool, "SELECT count(*) FROM check_ins"))
}
