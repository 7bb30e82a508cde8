package handlers_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"boxoffice/handlers"
	"boxoffice/platform/db"
	"boxoffice/testkit/dbtest"
)

// requireProblem checks that r is a problem of status and type typ that
// repeats nothing of what was sent and is small whatever was sent.
func requireProblem(t *testing.T, r response, status int, typ string, sent ...string) {
	t.Helper()
	require.Equal(t, status, r.status, "%s", r.body)
	require.Equal(t, typ, problemType(t, r), "%s", r.body)
	require.Less(t, len(r.body), 4<<10, "a problem is bounded in size: %d bytes", len(r.body))
	var p struct {
		Status int `json:"status"`
		Errors []struct {
			Location string `json:"location"`
			Message  string `json:"message"`
			Value    any    `json:"value"`
		} `json:"errors"`
	}
	require.NoError(t, json.Unmarshal(r.body, &p))
	require.Equal(t, status, p.Status)
	for _, e := range p.Errors {
		require.Nil(t, e.Value, "a problem never echoes the input: %s", r.body)
	}
	for _, internal := range []string{"SQLSTATE", "pgx", "invalid character", "cannot unmarshal", "Go value", "invalid UUID", "panic"} {
		require.NotContains(t, string(r.body), internal, "a problem never carries internal text")
	}
	for _, s := range sent {
		require.NotContains(t, string(r.body), s, "a problem never echoes the input")
	}
}

// D1, D2, D3, D5-like path ids, D6: bad holds are 4xx problems, not 500s,
// and write nothing.
func TestHostileHoldInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ev := b.createEvent(t, b.organizer(t))
	_, tok := b.buyer(t)
	adm := b.admit(t, tok, ev.ID)
	headers := func(key string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + tok, "X-Admission-Token": adm, "Idempotency-Key": key}
	}
	path := "/v1/events/" + ev.ID + "/holds"
	before := rowCounts(t, b.pool)
	for _, tc := range []struct {
		name    string
		path    string
		key     string
		body    string
		status  int
		typ     string
		echoed  string
		message string
	}{
		// D1: huma's uniqueItems hashed the untyped items and panicked.
		{"SeatIDsOfObjects", path, uuid.NewString(), `{"seatIds":[{}]}`, 422, handlers.TypeValidation, "", ""},
		{"SeatIDsOfArrays", path, uuid.NewString(), `{"seatIds":[[1]]}`, 422, handlers.TypeValidation, "", ""},
		{"SeatIDsOfObjectsTwice", path, uuid.NewString(), `{"seatIds":[{},{}]}`, 422, handlers.TypeValidation, "", ""},
		{"DuplicateSeats", path, uuid.NewString(), `{"seatIds":["` + ev.Seats[0] + `","` + ev.Seats[0] + `"]}`, 422, handlers.TypeValidation, "", "expected array items to be unique"},
		// D2: PostgreSQL refuses a key that is not UTF-8 (22021).
		{"IdempotencyKeyNotUTF8", path, "\xff", `{"seatIds":["` + ev.Seats[0] + `"]}`, 400, handlers.TypeMalformed, "", "expected UTF-8 text without NUL characters"},
		{"IdempotencyKeyHalfUTF8", path, "key-\xc3", `{"seatIds":["` + ev.Seats[0] + `"]}`, 400, handlers.TypeMalformed, "", ""},
		// D6: decoder text and the body itself were echoed.
		{"ControlCharInString", path, uuid.NewString(), "{\"seatIds\":[\"\x01secret-body\"]}", 400, handlers.TypeMalformed, "secret-body", "expected a JSON document"},
		{"HugeNumber", path, uuid.NewString(), `{"seatIds":[1e400]}`, 400, handlers.TypeMalformed, "1e400", ""},
		{"ShortUUID", path, uuid.NewString(), `{"seatIds":["1"]}`, 422, handlers.TypeValidation, "", ""},
		{"UUIDPathOfNUL", "/v1/events/%00/holds", uuid.NewString(), `{"seatIds":["` + ev.Seats[0] + `"]}`, 422, handlers.TypeValidation, "", ""},
		{"UUIDPathNotUTF8", "/v1/events/%ff/holds", uuid.NewString(), `{"seatIds":["` + ev.Seats[0] + `"]}`, 422, handlers.TypeValidation, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := b.do(t, http.MethodPost, tc.path, headers(tc.key), tc.body)
			var sent []string
			if tc.echoed != "" {
				sent = append(sent, tc.echoed)
			}
			requireProblem(t, res, tc.status, tc.typ, sent...)
			if tc.message != "" {
				require.Contains(t, string(res.body), tc.message)
			}
		})
	}
	require.Equal(t, before, rowCounts(t, b.pool), "a rejected hold wrote something")
}

// D6: a large malformed body is answered with a small problem: 16 MiB in
// was 96 MiB out.
func TestMalformedBodyIsNotEchoed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org := b.organizer(t)
	big := `{"name":"` + strings.Repeat("x", 1<<20) + "\x01\"}"
	res := b.do(t, http.MethodPost, "/v1/events", bearer(org), big)
	requireProblem(t, res, http.StatusBadRequest, handlers.TypeMalformed, strings.Repeat("x", 64))

	wrongType := `{"name":"` + strings.Repeat("y", 1<<20) + `","startsAt":"2027-06-01T19:30:00Z","currency":"eur","sections":[{"name":"A","rows":1e400,"seatsPerRow":1,"priceMinor":1}]}`
	res = b.do(t, http.MethodPost, "/v1/events", bearer(org), wrongType)
	require.Less(t, res.status, 500, "%s", res.body)
	requireProblem(t, res, res.status, problemType(t, res), strings.Repeat("y", 64))
}

// D3 and D4: text the database would refuse is a 422 problem, and a name
// is trimmed before it is judged.
func TestHostileEventText(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org := b.organizer(t)
	eventWith := func(name, section, seatSection, label string) map[string]any {
		body := map[string]any{"name": name, "startsAt": "2027-06-01T19:30:00Z", "currency": "eur"}
		if seatSection == "" {
			body["sections"] = []map[string]any{{"name": section, "rows": 1, "seatsPerRow": 2, "priceMinor": 100}}
		} else {
			body["seats"] = []map[string]any{{"section": seatSection, "label": label, "priceMinor": 100}}
		}
		return body
	}
	before := dbtest.Count(t, b.pool, "SELECT count(*) FROM events")
	for _, tc := range []struct {
		name     string
		body     map[string]any
		location string
	}{
		{"BlankName", eventWith("   ", "Floor", "", ""), "body.name"},
		{"TabsAndNewlinesName", eventWith("\t\n ", "Floor", "", ""), "body.name"},
		{"NULInName", eventWith("Night\u0000", "Floor", "", ""), "body.name"},
		{"NULInSectionName", eventWith("Night", "Fl\u0000or", "", ""), "body.sections[0].name"},
		{"BlankSectionName", eventWith("Night", "  ", "", ""), "body.sections[0].name"},
		{"NULInSeatSection", eventWith("Night", "", "Bal\u0000cony", "A-1"), "body.seats[0].section"},
		{"NULInSeatLabel", eventWith("Night", "", "Balcony", "A-\u00001"), "body.seats[0].label"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := b.do(t, http.MethodPost, "/v1/events", bearer(org), tc.body)
			requireProblem(t, res, http.StatusUnprocessableEntity, handlers.TypeValidation)
			require.Contains(t, string(res.body), `"location":"`+tc.location+`"`)
		})
	}
	require.Equal(t, before, dbtest.Count(t, b.pool, "SELECT count(*) FROM events"), "a rejected event was stored")

	res := b.do(t, http.MethodPost, "/v1/events", bearer(org), eventWith("  Night at the Opera \t", " Floor ", "", ""))
	require.Equal(t, http.StatusCreated, res.status, "%s", res.body)
	require.Equal(t, "Night at the Opera", res.json(t)["name"], "the name is stored trimmed")
	seats := b.do(t, http.MethodGet, "/v1/events/"+res.json(t)["id"].(string)+"/seats", nil, nil)
	require.Contains(t, string(seats.body), `"section":"Floor"`)
}

// D4 for webhook endpoints: a NUL in the description, on create and on
// PATCH, is a 422 problem.
func TestHostileWebhookEndpointText(t *testing.T) {
	t.Parallel()
	b := setupWebhooks(t, true)
	tok, _ := b.organizerOf(t)
	res := b.do(t, http.MethodPost, "/v1/webhook-endpoints", bearer(tok), map[string]any{"url": "http://127.0.0.1:9/hook", "description": "a\u0000b"})
	requireProblem(t, res, http.StatusUnprocessableEntity, handlers.TypeValidation)
	require.EqualValues(t, 0, dbtest.Count(t, b.pool, "SELECT count(*) FROM webhook_endpoints"))

	ep := b.createEndpoint(t, tok, map[string]any{"url": "http://127.0.0.1:9/hook", "description": "fine"})
	res = b.do(t, http.MethodPatch, "/v1/webhook-endpoints/"+ep["id"].(string), bearer(tok), map[string]any{"description": "a\u0000b"})
	requireProblem(t, res, http.StatusUnprocessableEntity, handlers.TypeValidation)
	res = b.do(t, http.MethodPatch, "/v1/webhook-endpoints/"+ep["id"].(string), bearer(tok), map[string]any{"url": "http://127.0.0.1:9/\u0000"})
	require.Equal(t, http.StatusUnprocessableEntity, res.status, "%s", res.body)
	res = b.do(t, http.MethodGet, "/v1/webhook-endpoints/"+ep["id"].(string), bearer(tok), nil)
	require.Equal(t, "fine", res.json(t)["description"])
	res = b.do(t, http.MethodGet, "/v1/webhook-endpoints/%00", bearer(tok), nil)
	requireProblem(t, res, http.StatusUnprocessableEntity, handlers.TypeValidation)
}

// D5: the sandbox's intent id is a pattern, not any string.
func TestHostileSandboxIntentID(t *testing.T) {
	t.Parallel()
	b := setupSandbox(t)
	_, tok := b.buyer(t)
	for _, id := range []string{"%00", "%ff", "pi_%00", "pi_%ff", "x"} {
		for _, action := range []string{"authorize", "decline"} {
			res := b.api.do(t, http.MethodPost, "/v1/sandbox/payment-intents/"+id+"/"+action, bearer(tok), nil)
			requireProblem(t, res, http.StatusUnprocessableEntity, handlers.TypeValidation)
		}
	}
}

// D7: what no operation answers is a problem too.
func TestUnroutedRequestsAreProblems(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org := b.organizer(t)

	res := b.do(t, http.MethodGet, "/v1/nothing-here", nil, nil)
	requireProblem(t, res, http.StatusNotFound, handlers.TypeNotFound)

	res = b.do(t, http.MethodPut, "/v1/events", bearer(org), `{}`)
	requireProblem(t, res, http.StatusMethodNotAllowed, handlers.TypeMethodNotAllowed)
	require.Contains(t, res.header.Get("Allow"), http.MethodPost)

	// /metrics is not on the public API (R5): serve has it on OPS_ADDR.
	res = b.do(t, http.MethodGet, "/metrics", nil, nil)
	requireProblem(t, res, http.StatusNotFound, handlers.TypeNotFound)

	// Headers over the limit but within what net/http reads: the
	// middleware's 431 problem.
	res = b.do(t, http.MethodGet, "/v1/events/"+uuid.NewString(), map[string]string{"X-Padding": strings.Repeat("p", handlers.MaxHeaderBytes)}, nil)
	requireProblem(t, res, http.StatusRequestHeaderFieldsTooLarge, handlers.TypeHeadersTooLarge)
}

// D7: the errors net/http writes on the connection itself (headers beyond
// its read limit, a request line it cannot parse) are problems through
// ProblemListener, as serve runs it.
func TestProtocolErrorsAreProblems(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := httptest.NewUnstartedServer(b.srv.Config.Handler)
	srv.Config.MaxHeaderBytes = handlers.MaxHeaderBytes
	srv.Config.ReadTimeout = 500 * time.Millisecond
	srv.Listener = handlers.ProblemListener(srv.Listener)
	srv.Start()
	t.Cleanup(srv.Close)

	raw := func(t *testing.T, request string) (*http.Response, []byte) {
		t.Helper()
		conn, err := net.DialTimeout("tcp", srv.Listener.Addr().String(), 5*time.Second)
		require.NoError(t, err)
		defer conn.Close()
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = io.WriteString(conn, request)
		require.NoError(t, err)
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res, body
	}
	check := func(t *testing.T, res *http.Response, body []byte, status int, typ string) {
		t.Helper()
		requireProblem(t, response{status: res.StatusCode, header: res.Header, body: body}, status, typ)
	}

	res, body := raw(t, "GET /v1/events HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("b", 4*handlers.MaxHeaderBytes)+"\r\n\r\n")
	check(t, res, body, http.StatusRequestHeaderFieldsTooLarge, handlers.TypeHeadersTooLarge)

	res, body = raw(t, "GET /v1/events HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
	check(t, res, body, http.StatusBadRequest, handlers.TypeMalformed)

	// A body framed wrongly (a chunk size that is not hex) and a body that
	// stops arriving (the server's ReadTimeout) are problems too.
	org := b.organizer(t)
	post := "POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + org + "\r\nContent-Type: application/json\r\n"
	res, body = raw(t, post+"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
	check(t, res, body, http.StatusBadRequest, handlers.TypeMalformed)
	res, body = raw(t, post+"Content-Length: 100\r\n\r\n{\"name\":")
	check(t, res, body, http.StatusRequestTimeout, handlers.TypeRequestTimeout)

	// A normal answer passes through the listener untouched.
	res, body = raw(t, fmt.Sprintf("GET /v1/events/%s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", uuid.NewString()))
	check(t, res, body, http.StatusNotFound, handlers.TypeNotFound)
}

// The bearer scheme is case-insensitive (RFC 9110 §11.1).
func TestBearerSchemeIsCaseInsensitive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, tok := b.buyer(t)
	path := "/v1/orders/" + uuid.NewString()
	for _, scheme := range []string{"Bearer", "bearer", "BEARER", "bEaReR"} {
		res := b.do(t, http.MethodGet, path, map[string]string{"Authorization": scheme + " " + tok}, nil)
		requireProblem(t, res, http.StatusNotFound, handlers.TypeNotFound) // authenticated: the order is not there
	}
	// A parameter of an embedded input struct is checked like the others.
	res := b.do(t, http.MethodGet, path+"/events", map[string]string{"Authorization": "Bearer " + tok, "Last-Event-ID": "\xff"}, nil)
	requireProblem(t, res, http.StatusBadRequest, handlers.TypeMalformed)
	for _, header := range []string{"Bearer", "Bearer ", "Basic " + tok, "Bearertoken"} {
		res := b.do(t, http.MethodGet, path, map[string]string{"Authorization": header}, nil)
		requireProblem(t, res, http.StatusUnauthorized, handlers.TypeUnauthorized)
	}
}

// A seat whose row lock another session holds past the pool's
// lock_timeout: a hold on it answers 503 with Retry-After and writes
// nothing, and a hold on another seat of the same event goes through.
func TestHoldBehindALongLockIsA503(t *testing.T) {
	t.Parallel()
	url := dbtest.NewURL(t)
	ctx := context.Background()
	pool, err := db.NewPool(ctx, db.PoolConfig{URL: url, MaxConns: 8, LockTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b := setupPool(t, pool)
	org := b.organizer(t)
	ev := b.createEvent(t, org)

	// Another session locks seat 0 and keeps it until the test ends.
	locker, err := pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = locker.Rollback(context.Background()) })
	_, err = locker.Exec(ctx, "SELECT 1 FROM seats WHERE id = $1 FOR UPDATE", ev.Seats[0])
	require.NoError(t, err)

	_, buyer := b.buyer(t)
	adm := b.admit(t, buyer, ev.ID)
	res := b.hold(t, buyer, adm, ev.ID, "locked", ev.Seats[0])
	require.Equal(t, http.StatusServiceUnavailable, res.status, "%s", res.body)
	require.Equal(t, handlers.TypeUnavailable, problemType(t, res))
	require.NotEmpty(t, res.header.Get("Retry-After"))
	require.NotContains(t, res.body, "55P03", "no SQL in the answer")
	require.Zero(t, dbtest.Count(t, pool, "SELECT count(*) FROM orders"), "nothing written")

	res = b.hold(t, buyer, adm, ev.ID, "free", ev.Seats[1])
	require.Equal(t, http.StatusAccepted, res.status, "another seat is not behind the lock: %s", res.body)
}
