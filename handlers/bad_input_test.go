package handlers_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
	"boxoffice/platform/auth"
)

// Every malformed or unauthorised hold gets the right 4xx problem and writes
// nothing at all.
func TestHoldBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org := b.organizer(t)
	ev := b.createEvent(t, org)
	other := b.createEvent(t, org)
	userID, tok := b.buyer(t)
	_, otherTok := b.buyer(t)
	adm := b.admit(t, tok, ev.ID)

	mintAdmission := func(key []byte, sub uuid.UUID, eventID string, cell string, exp time.Time) string {
		claims := jwt.MapClaims{
			"jti": uuid.NewString(), "sub": sub.String(), "event_id": eventID, "cell": cell,
			"iat": time.Now().Add(-time.Hour).Unix(), "exp": exp.Unix(),
		}
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(key)
		require.NoError(t, err)
		return b.remember(s)
	}
	expiredBearer, err := auth.Mint(jwtSecret, auth.Identity{UserID: userID, Role: auth.RoleBuyer}, -time.Minute)
	require.NoError(t, err)
	b.remember(expiredBearer)
	forgedBearer, err := auth.Mint([]byte("another-secret-another-secret-another-secret"), auth.Identity{UserID: userID, Role: auth.RoleBuyer}, time.Hour)
	require.NoError(t, err)
	b.remember(forgedBearer)
	unknownEvent := uuid.NewString()
	unknownEventAdm, _, err := b.signer.Issue(userID, uuid.MustParse(unknownEvent), "default")
	require.NoError(t, err)
	b.remember(unknownEventAdm)

	good := func() map[string]string {
		return map[string]string{"Authorization": "Bearer " + tok, "X-Admission-Token": adm, "Idempotency-Key": uuid.NewString()}
	}
	with := func(k, v string) map[string]string {
		h := good()
		if v == "" {
			delete(h, k)
		} else {
			h[k] = v
		}
		return h
	}
	seats := func(ids ...string) map[string]any { return map[string]any{"seatIds": ids} }
	path := "/v1/events/" + ev.ID + "/holds"
	nine := ev.Seats[:9]

	cases := []struct {
		name    string
		path    string
		headers map[string]string
		body    any
		status  int
		typ     string
	}{
		{"NoBearer", path, with("Authorization", ""), seats(ev.Seats[0]), 401, handlers.TypeUnauthorized},
		{"MalformedBearer", path, with("Authorization", "Bearer not-a-jwt"), seats(ev.Seats[0]), 401, handlers.TypeUnauthorized},
		{"BasicAuthInsteadOfBearer", path, with("Authorization", "Basic dXNlcjpwYXNz"), seats(ev.Seats[0]), 401, handlers.TypeUnauthorized},
		{"ExpiredBearer", path, with("Authorization", "Bearer "+expiredBearer), seats(ev.Seats[0]), 401, handlers.TypeUnauthorized},
		{"ForgedBearer", path, with("Authorization", "Bearer "+forgedBearer), seats(ev.Seats[0]), 401, handlers.TypeUnauthorized},
		{"OrganizerCannotHold", path, with("Authorization", "Bearer "+org), seats(ev.Seats[0]), 403, handlers.TypeForbidden},
		{"MissingIdempotencyKey", path, with("Idempotency-Key", ""), seats(ev.Seats[0]), 400, handlers.TypeMalformed},
		{"MissingAdmissionToken", path, with("X-Admission-Token", ""), seats(ev.Seats[0]), 400, handlers.TypeMalformed},
		{"OverlongIdempotencyKey", path, with("Idempotency-Key", strings.Repeat("k", 256)), seats(ev.Seats[0]), 400, handlers.TypeMalformed},
		{"MalformedJSON", path, good(), `{"seatIds": [`, 400, handlers.TypeMalformed},
		{"NotAnObject", path, good(), `[1,2]`, 422, handlers.TypeValidation},
		{"NonUUIDSeat", path, good(), seats("seat-1"), 422, handlers.TypeValidation},
		{"NoSeats", path, good(), seats(), 422, handlers.TypeValidation},
		{"NineSeats", path, good(), seats(nine...), 422, handlers.TypeValidation},
		{"DuplicateSeats", path, good(), seats(ev.Seats[0], ev.Seats[0]), 422, handlers.TypeValidation},
		{"SeatOfAnotherEvent", path, good(), seats(ev.Seats[0], other.Seats[0]), 422, handlers.TypeValidation},
		{"UnknownSeat", path, good(), seats(uuid.NewString()), 422, handlers.TypeValidation},
		{"NonUUIDEvent", "/v1/events/nope/holds", good(), seats(ev.Seats[0]), 422, handlers.TypeValidation},
		{"UnknownEvent", "/v1/events/" + unknownEvent + "/holds", with("X-Admission-Token", unknownEventAdm), seats(ev.Seats[0]), 404, handlers.TypeNotFound},
		{"AdmissionForAnotherEvent", "/v1/events/" + other.ID + "/holds", good(), seats(other.Seats[0]), 403, handlers.TypeAdmissionInvalid},
		{"AdmissionOfAnotherBuyer", path, with("Authorization", "Bearer "+otherTok), seats(ev.Seats[0]), 403, handlers.TypeAdmissionInvalid},
		{"ExpiredAdmission", path, with("X-Admission-Token", mintAdmission(admissionKey, userID, ev.ID, "default", time.Now().Add(-time.Second))), seats(ev.Seats[0]), 403, handlers.TypeAdmissionInvalid},
		{"ForgedAdmission", path, with("X-Admission-Token", mintAdmission([]byte("forged-key-forged-key-forged-key-forged"), userID, ev.ID, "default", time.Now().Add(time.Hour))), seats(ev.Seats[0]), 403, handlers.TypeAdmissionInvalid},
		{"AdmissionForAnotherCell", path, with("X-Admission-Token", mintAdmission(admissionKey, userID, ev.ID, "cell-9", time.Now().Add(time.Hour))), seats(ev.Seats[0]), 403, handlers.TypeAdmissionInvalid},
		{"GarbageAdmission", path, with("X-Admission-Token", "garbage"), seats(ev.Seats[0]), 403, handlers.TypeAdmissionInvalid},
		{"OversizedBody", path, good(), `{"seatIds":["` + strings.Repeat("a", 8<<10) + `"]}`, 413, handlers.TypePayloadTooLarge},
	}
	before := rowCounts(t, b.pool)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := b.do(t, http.MethodPost, tc.path, tc.headers, tc.body)
			require.Equal(t, tc.status, res.status, "%s", res.body)
			require.Equal(t, tc.typ, problemType(t, res), "%s", res.body)
			require.NotContains(t, string(res.body), "SQL")
			require.NotContains(t, string(res.body), "pgx")
		})
	}
	require.Equal(t, before, rowCounts(t, b.pool), "a rejected request wrote something")

	// The same seat, asked for properly, still works: nothing above took it.
	res := b.hold(t, tok, adm, ev.ID, uuid.NewString(), ev.Seats[0])
	require.Equal(t, http.StatusAccepted, res.status, "%s", res.body)
}
