package handlers_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"boxoffice/domain/catalog"
	"boxoffice/domain/cells"
	"boxoffice/domain/payments"
	"boxoffice/domain/payments/sandbox"
	"boxoffice/domain/purchase"
	"boxoffice/domain/tickets"
	"boxoffice/domain/waitingroom"
	"boxoffice/domain/waitlist"
	"boxoffice/domain/webhooks"
	"boxoffice/handlers"
	"boxoffice/platform/admission"
	"boxoffice/platform/apikey"
	"boxoffice/platform/auth"
	"boxoffice/sqlcgen"
	"boxoffice/testkit/dbtest"
)

// FuzzAPI drives every operation of the API through the real handler stack
// (handlers.New(...).Handler() with every optional part configured) against
// a real database, with hostile path ids, headers, query strings and bodies,
// and holds the API to invariant 7 on every answer:
//
//   - never a 5xx;
//   - every 4xx is an application/problem+json object with type, title and
//     a status equal to the HTTP status, at most maxErrorBody bytes whatever
//     was sent, that neither echoes the request body nor shows SQL, pgx or
//     decoder internals;
//   - a rejected (4xx) request wrote nothing: no row of any table was
//     inserted, updated or deleted.
//
// The operations are read from the API's own OpenAPI document, so a new
// operation is fuzzed without touching this file (TestFuzzAPIReachesEveryOperation
// fails when it takes a path parameter the harness has no fixture for).
//
// The inputs, kept few and typed so that the corpus in
// testdata/fuzz/FuzzAPI reads like a request:
//
//	op     the operationId, or an HTTP method for a raw request to the path
//	       in param (unknown routes, wrong methods); anything else is hashed
//	       onto one of those
//	who    the bearer (who%4): 0 none, 1 the buyer, 2 the organizer, 3 garbage
//	sel    bits 0-2: the header that gets hdr (see fuzzHeaders); bit 3
//	       (selParam): the path parameter is param instead of the fixture's
//	       id; bit 4 (selSign): Stripe-Signature is a valid signature of the
//	       body with the test secret
//	param  the path parameter (percent-encoded into the path), or the whole
//	       path of a raw request
//	hdr    a header value
//	query  the query string (bytes a URL cannot hold are percent-encoded)
//	body   the request body; $EVENT, $SEAT, $ORDER, $INTENT, $ENDPOINT,
//	       $MESSAGE and $BUYER are replaced by fixture ids
//
// Run it with
//
//	go test -run '^$' -fuzz '^FuzzAPI$' -fuzztime 15000x ./handlers/
//
// (a count of inputs, as .ci/run does: a duration can fail on go1.26 with
// a bare "context deadline exceeded" that found nothing, go.dev/issue/75804)
//
// Plain `go test` runs the seed corpus (every case of issue 14's table, and
// one ordinary request per operation) as regression tests.
func FuzzAPI(f *testing.F) {
	e := newFuzzEnv(f)
	for _, s := range fuzzSeeds() {
		f.Add(s.op, s.who, s.sel, s.param, s.hdr, s.query, s.body)
	}
	// One ordinary request per operation, so that a new one is fuzzed from
	// the start even before anyone writes it a seed.
	for _, op := range e.ops {
		f.Add(op.id, op.who(), fuzzHdrCorrelation|selSign, "", "fuzz", "", []byte(fuzzBodies[op.id]))
	}
	f.Fuzz(func(t *testing.T, op string, who, sel uint8, param, hdr, query string, body []byte) {
		e.run(t, fuzzInput{op: op, who: who, sel: sel, param: param, hdr: hdr, query: query, body: body})
	})
}

// TestFuzzAPIReachesEveryOperation fails when openapi.yaml lists an
// operation the fuzz harness's server does not serve, or one whose path
// parameters it has no fixture for.
func TestFuzzAPIReachesEveryOperation(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../openapi.yaml")
	require.NoError(t, err)
	ops := fuzzOperations(t, fuzzConfig(handlers.Config{Cells: cells.Single(&cells.Cell{Name: cells.Default, Sandbox: &sandbox.Sandbox{}})}))
	served := map[string]bool{}
	for _, op := range ops {
		served[op.method+" "+op.path] = true
		for _, p := range op.params {
			require.Contains(t, fuzzParamFixtures, p, "%s %s: the fuzz harness has no fixture for path parameter %q; add one to fuzzParamFixtures", op.method, op.path, p)
		}
	}
	listed := yamlOperations(t, raw)
	require.NotEmpty(t, listed)
	for _, op := range listed {
		require.True(t, served[op], "openapi.yaml lists %s, which the fuzz harness cannot reach", op)
	}
}

// TestFuzzAPISeedCorpus keeps testdata/fuzz/FuzzAPI in step with fuzzSeeds:
// every named seed is a committed corpus file. BOXOFFICE_WRITE_FUZZ_SEEDS=1
// writes them.
func TestFuzzAPISeedCorpus(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "fuzz", "FuzzAPI")
	write := os.Getenv("BOXOFFICE_WRITE_FUZZ_SEEDS") == "1"
	for _, s := range fuzzSeeds() {
		path := filepath.Join(dir, s.name)
		want := s.corpusFile()
		if write {
			require.NoError(t, os.MkdirAll(dir, 0o755))
			require.NoError(t, os.WriteFile(path, want, 0o644))
			continue
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err, "seed %s has no corpus file: run with BOXOFFICE_WRITE_FUZZ_SEEDS=1", s.name)
		require.Equal(t, string(want), string(got), "corpus file %s differs from its seed: run with BOXOFFICE_WRITE_FUZZ_SEEDS=1", s.name)
	}
}

const (
	// maxErrorBody bounds every error answer, whatever was sent.
	maxErrorBody = 16 << 10
	// maxBody bounds any answer the harness reads; more is a finding.
	maxBody = 4 << 20
	// maxHeader bounds a fuzzed header value, well under the server's
	// header limit (whose answer the handlers do not write).
	maxHeader = 16 << 10
	// fuzzTimeout bounds each request; a stream is accepted once its
	// headers arrive.
	fuzzTimeout = 10 * time.Second
)

// Selector bits of the sel input.
const (
	fuzzHdrIdempotencyKey uint8 = iota
	fuzzHdrAdmissionToken
	fuzzHdrIfNoneMatch
	fuzzHdrStripeSignature
	fuzzHdrContentType
	fuzzHdrAuthorization
	fuzzHdrAccept
	fuzzHdrCorrelation

	selParam uint8 = 1 << 3
	selSign  uint8 = 1 << 4
)

// fuzzHeaders are the headers hdr may go to, by sel&7.
var fuzzHeaders = [8]string{
	"Idempotency-Key", "X-Admission-Token", "If-None-Match", "Stripe-Signature",
	"Content-Type", "Authorization", "Accept", "X-Correlation-Id",
}

// Bearer selectors of the who input.
const (
	whoNone uint8 = iota
	whoBuyer
	whoOrganizer
	whoGarbage
)

// rawMethods are the op values that send a raw request to param.
var rawMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions,
}

// fuzzParamFixtures maps each path parameter name to the fixture id
// substituted for it.
var fuzzParamFixtures = map[string]func(e *fuzzEnv) string{
	"eventId":    func(e *fuzzEnv) string { return e.eventID.String() },
	"orderId":    func(e *fuzzEnv) string { return e.orderID.String() },
	"id":         func(e *fuzzEnv) string { return e.intentID },
	"endpointId": func(e *fuzzEnv) string { return e.endpointID.String() },
	"messageId":  func(e *fuzzEnv) string { return e.messageID.String() },
	"apiKeyId":   func(e *fuzzEnv) string { return e.apiKeyID.String() },
	"entryId":    func(e *fuzzEnv) string { return e.entryID.String() },
}

// fuzzBodies are ordinary bodies per operation, for the per-operation seeds.
var fuzzBodies = map[string]string{
	"create-event": `{"name":"Fuzz Night","startsAt":"2027-06-01T19:30:00Z","currency":"eur",` +
		`"sections":[{"name":"Floor","rows":1,"seatsPerRow":2,"priceMinor":100}]}`,
	"create-hold":              `{"seatIds":["$SEAT"]}`,
	"update-onsale":            `{"maxRate":1000}`,
	"revoke-admission":         `{"userId":"$BUYER"}`,
	"create-api-key":           `{"name":"fuzz"}`,
	"create-webhook-endpoint":  `{"url":"https://hooks.example.com/fuzz","description":"fuzz","eventTypes":["order.paid"]}`,
	"update-webhook-endpoint":  `{"description":"fuzzed","rateLimitPerSecond":5}`,
	"recover-webhook-endpoint": `{"since":"2020-01-01T00:00:00Z"}`,
	"replay-webhook-message":   `{"endpointId":"$ENDPOINT"}`,
	"receive-stripe-webhook":   stripeFuzzEvent("evt_fuzz", "pi_fuzz"),
}

// stripeFuzzEvent is a Stripe event about the fixture order's intent.
func stripeFuzzEvent(eventID, intentID string) string {
	return stripeFuzzEventMeta(eventID, intentID, `{"order_id":"$ORDER"}`)
}

// stripeFuzzEventMeta is a Stripe event about an intent with metadata.
func stripeFuzzEventMeta(eventID, intentID, metadata string) string {
	return `{"id":"` + eventID + `","object":"event","type":"payment_intent.amount_capturable_updated",` +
		`"created":1700000000,"api_version":"2024-06-20","livemode":false,"data":{"object":{"id":"` + intentID +
		`","object":"payment_intent","amount":5000,"currency":"eur","amount_capturable":5000,` +
		`"status":"requires_capture","metadata":` + metadata + `}}}`
}

type fuzzInput struct {
	op         string
	who, sel   uint8
	param, hdr string
	query      string
	body       []byte
	name       string // of a seed
}

// fuzzSeeds are the seed corpus: every case of issue 14's table.
func fuzzSeeds() []fuzzInput {
	event := func(name, section string, seats string) string {
		if seats != "" {
			return `{"name":"` + name + `","startsAt":"2027-06-01T19:30:00Z","currency":"eur","seats":` + seats + `}`
		}
		return `{"name":"` + name + `","startsAt":"2027-06-01T19:30:00Z","currency":"eur",` +
			`"sections":[{"name":"` + section + `","rows":1,"seatsPerRow":2,"priceMinor":100}]}`
	}
	corr := fuzzHdrCorrelation
	s := func(name, op string, who, sel uint8, param, hdr, query, body string) fuzzInput {
		return fuzzInput{name: name, op: op, who: who, sel: sel, param: param, hdr: hdr, query: query, body: []byte(body)}
	}
	// A big malformed body: a string with a control character after 1 MiB.
	big := `{"name":"` + strings.Repeat("A", 1<<20) + "\x01" + `","startsAt":"2027-06-01T19:30:00Z","currency":"eur"}`
	return []fuzzInput{
		s("D1-hold-seat-object", "create-hold", whoBuyer, corr, "", "fuzz", "", `{"seatIds":[{}]}`),
		s("D1-hold-seat-array", "create-hold", whoBuyer, corr, "", "fuzz", "", `{"seatIds":[[1]]}`),
		s("D1-hold-seats-mixed", "create-hold", whoBuyer, corr, "", "fuzz", "", `{"seatIds":[{},{}]}`),
		s("D2-idempotency-key-not-utf8", "create-hold", whoBuyer, fuzzHdrIdempotencyKey, "", "\xff", "", `{"seatIds":["$SEAT"]}`),
		s("D2-idempotency-key-not-utf8-mid", "create-hold", whoBuyer, fuzzHdrIdempotencyKey, "", "key-\xc3\x28", "", `{"seatIds":["$SEAT"]}`),
		s("D3-event-name-spaces", "create-event", whoOrganizer, corr, "", "fuzz", "", event("   ", "Floor", "")),
		s("D4-event-name-nul", "create-event", whoOrganizer, corr, "", "fuzz", "", event(`Night\u0000`, "Floor", "")),
		s("D4-section-name-nul", "create-event", whoOrganizer, corr, "", "fuzz", "", event("Night", `Fl\u0000oor`, "")),
		s("D4-seat-label-nul", "create-event", whoOrganizer, corr, "", "fuzz", "", event("Night", "", `[{"section":"A","label":"A-\u00001","priceMinor":100}]`)),
		s("D4-seat-section-nul", "create-event", whoOrganizer, corr, "", "fuzz", "", event("Night", "", `[{"section":"\u0000","label":"A-1","priceMinor":100}]`)),
		s("D4-endpoint-description-nul-create", "create-webhook-endpoint", whoOrganizer, corr, "", "fuzz", "",
			`{"url":"https://hooks.example.com/nul","description":"CRM\u0000"}`),
		s("D4-endpoint-description-nul-patch", "update-webhook-endpoint", whoOrganizer, corr, "", "fuzz", "", `{"description":"\u0000"}`),
		s("D5-sandbox-authorize-nul", "sandbox-authorize-payment-intent", whoBuyer, corr|selParam, "\x00", "fuzz", "", ""),
		s("D5-sandbox-authorize-ff", "sandbox-authorize-payment-intent", whoBuyer, corr|selParam, "\xff", "fuzz", "", ""),
		s("D5-sandbox-decline-nul", "sandbox-decline-payment-intent", whoBuyer, corr|selParam, "\x00", "fuzz", "", ""),
		s("D5-sandbox-decline-ff", "sandbox-decline-payment-intent", whoBuyer, corr|selParam, "\xff", "fuzz", "", ""),
		s("D6-body-control-character", "create-event", whoOrganizer, corr, "", "fuzz", "", event("Ni\x01ght", "Floor", "")),
		s("D6-body-number-1e400", "create-event", whoOrganizer, corr, "", "fuzz", "",
			`{"name":"Night","startsAt":"2027-06-01T19:30:00Z","currency":"eur","sections":[{"name":"A","rows":1,"seatsPerRow":1,"priceMinor":1e400}]}`),
		s("D6-body-uuid-length-1", "create-hold", whoBuyer, corr, "", "fuzz", "", `{"seatIds":["a"]}`),
		s("D6-body-uuid-length-1-revoke", "revoke-admission", whoOrganizer, corr, "", "fuzz", "", `{"userId":"a"}`),
		s("D6-body-large-malformed", "create-event", whoOrganizer, corr, "", "fuzz", "", big),
		s("D7-unknown-route", http.MethodGet, whoNone, corr, "/v1/nope", "fuzz", "", ""),
		s("D7-wrong-method", http.MethodPut, whoOrganizer, corr, "/v1/events", "fuzz", "", `{}`),
		s("D7-wrong-method-delete-event", http.MethodDelete, whoOrganizer, corr, "/v1/events/$EVENT", "fuzz", "", ""),
		s("D8-stripe-event-id-nul", "receive-stripe-webhook", whoNone, corr|selSign, "", "fuzz", "", stripeFuzzEvent(`evt_\u0000`, "pi_fuzz")),
		s("D8-stripe-intent-id-nul", "receive-stripe-webhook", whoNone, corr|selSign, "", "fuzz", "",
			stripeFuzzEventMeta("evt_fuzz_nul_intent", `pi_\u0000`, `{}`)),
		s("D8-stripe-intent-id-nul-of-the-order", "receive-stripe-webhook", whoNone, corr|selSign, "", "fuzz", "",
			stripeFuzzEvent("evt_fuzz_nul_intent_order", `pi_\u0000`)),
	}
}

// corpusFile is s in the go test fuzz v1 format.
func (s fuzzInput) corpusFile() []byte {
	var b bytes.Buffer
	b.WriteString("go test fuzz v1\n")
	fmt.Fprintf(&b, "string(%q)\nbyte(%q)\nbyte(%q)\nstring(%q)\nstring(%q)\nstring(%q)\n[]byte(%q)\n",
		s.op, s.who, s.sel, s.param, s.hdr, s.query, s.body)
	return b.Bytes()
}

// fuzzOp is one operation of the API.
type fuzzOp struct {
	id, method, path string
	params           []string
	roles            []auth.Role // who may call it; none: anyone
}

// who is the bearer an ordinary request of op carries: the buyer when
// buyers may call it, else the organizer.
func (op fuzzOp) who() uint8 {
	switch {
	case len(op.roles) == 0:
		return whoNone
	case slices.Contains(op.roles, auth.RoleBuyer):
		return whoBuyer
	}
	return whoOrganizer
}

var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// fuzzOperations lists the operations of the API cfg configures, from its
// own OpenAPI document, sorted by operationId.
func fuzzOperations(tb testing.TB, cfg handlers.Config) []fuzzOp {
	tb.Helper()
	cfg.Registerer = nil // the server's handlers registered the metrics already
	api := handlers.New(cfg).NewAPI(http.NewServeMux())
	var ops []fuzzOp
	for path, item := range api.OpenAPI().Paths {
		for method, hop := range map[string]*huma.Operation{
			http.MethodGet: item.Get, http.MethodPost: item.Post, http.MethodPut: item.Put,
			http.MethodPatch: item.Patch, http.MethodDelete: item.Delete, http.MethodHead: item.Head,
			http.MethodOptions: item.Options, http.MethodTrace: item.Trace,
		} {
			if hop == nil {
				continue
			}
			fo := fuzzOp{id: hop.OperationID, method: method, path: path}
			if len(hop.Security) > 0 {
				// The roles secured() stores; an unknown shape still
				// makes the operation secured.
				fo.roles, _ = hop.Metadata["role"].([]auth.Role)
				if fo.roles == nil {
					fo.roles = []auth.Role{auth.RoleOrganizer}
				}
			}
			for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
				fo.params = append(fo.params, m[1])
			}
			ops = append(ops, fo)
		}
	}
	slices.SortFunc(ops, func(a, b fuzzOp) int { return strings.Compare(a.id, b.id) })
	require.NotEmpty(tb, ops)
	return ops
}

// yamlOperations lists "METHOD /path" of every operation in an OpenAPI
// document as `boxoffice openapi` writes it.
func yamlOperations(tb testing.TB, doc []byte) []string {
	tb.Helper()
	var spec struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	require.NoError(tb, yamlToJSON(doc, &spec))
	var out []string
	for path, item := range spec.Paths {
		for method := range item {
			m := strings.ToUpper(method)
			if slices.Contains([]string{"GET", "PUT", "POST", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"}, m) {
				out = append(out, m+" "+path)
			}
		}
	}
	slices.Sort(out)
	return out
}

// fuzzConfig completes cfg with every optional part the harness does not
// care about the state of.
func fuzzConfig(cfg handlers.Config) handlers.Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Bearer == nil {
		cfg.Bearer = auth.NewVerifier(jwtSecret)
	}
	if cfg.Admission == nil {
		cfg.Admission = admission.NewSigner(admission.SignerConfig{Key: admissionKey})
	}
	return cfg
}

// stubResolver answers every well-formed host name with a public address,
// without the network, so that the SSRF guard runs as in production and
// fuzzed host names never leave the machine. Names under .internal resolve
// to a private address.
type stubResolver struct{}

var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,62}\.)*[A-Za-z0-9-]{1,63}$`)

func (stubResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	switch {
	case len(host) > 253 || !hostName.MatchString(host):
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	case strings.HasSuffix(host, ".internal"):
		return []netip.Addr{netip.MustParseAddr("10.1.2.3")}, nil
	}
	return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
}

// fuzzEnv is the server and the fixtures one fuzzing process shares: the
// fuzz function runs inputs one at a time, so the before/after row counts
// of a request see only that request's writes (nothing runs in the
// background: no sandbox webhook sender, no admitter, no delivery worker).
type fuzzEnv struct {
	pool      *pgxpool.Pool
	srv       *httptest.Server
	client    *http.Client
	ops       []fuzzOp
	byID      map[string]fuzzOp
	signer    *admission.Signer
	catalog   *catalog.Catalog
	purchase  *purchase.Service
	sandbox   *sandbox.Sandbox
	webhooks  *webhooks.Service
	writesSQL string

	orgID      uuid.UUID
	orgToken   string
	buyerID    uuid.UUID
	buyerToken string
	eventID    uuid.UUID
	seats      []uuid.UUID
	nextSeat   int
	orderID    uuid.UUID
	intentID   string
	endpointID uuid.UUID
	messageID  uuid.UUID
	apiKeyID   uuid.UUID
	entryID    uuid.UUID // a waitlist entry nobody has: 404
}

func newFuzzEnv(tb testing.TB) *fuzzEnv {
	tb.Helper()
	pool := dbtest.New(tb)
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	signer := admission.NewSigner(admission.SignerConfig{Key: admissionKey})
	cat := catalog.New(pool)
	pur := purchase.NewService(pool, logger, purchase.Config{})
	sb, err := sandbox.New(pool, sandbox.Config{WebhookSecret: webhookSecret, Logger: logger})
	require.NoError(tb, err)
	wh := webhooks.NewService(pool, webhooks.ServiceConfig{Guard: &webhooks.Guard{Resolver: stubResolver{}}, Keys: testWebhookKeys, Logger: logger})
	reg := prometheus.NewRegistry()
	room := waitingroom.NewRoom(waitingroom.RoomConfig{
		Store: waitingroom.NewMemoryStore(), Signer: signer, Events: cat,
		Onsales:    waitingroom.NewOnsales(pool),
		Controller: waitingroom.NewController(waitingroom.ControllerConfig{Logger: logger}),
		Logger:     logger,
	})
	pub, _, err := ed25519.GenerateKey(nil)
	require.NoError(tb, err)
	cfg := handlers.Config{
		Logger: logger, Bearer: auth.NewVerifier(jwtSecret), Admission: signer,
		Cells: cells.Single(&cells.Cell{
			Name: cells.Default, Pool: pool, Room: room, Catalog: cat, Purchase: pur,
			Ingress: payments.NewIngress(pool, payments.IngressConfig{
				WebhookSecret: webhookSecret, Logger: logger, Provider: sb, Registerer: reg,
			}),
			Sandbox: sb, Webhooks: wh, Door: tickets.NewDoor(pool, pub), APIKeys: apikey.NewStore(pool),
			Waitlist: waitlist.New(pool, pur, waitlist.Config{Logger: logger}),
		}),
		TicketPublicKey: pub,
		Checks:          []handlers.Check{{Name: "database", Func: pool.Ping, Required: true}},
		Registerer:      reg,
	}
	// Every answer, to seeds and to what the fuzzer finds, must also be
	// one openapi.yaml documents (contract_test.go).
	srv := httptest.NewServer(validating(tb, handlers.New(cfg).Handler()))
	tb.Cleanup(srv.Close)
	e := &fuzzEnv{
		pool: pool, srv: srv, signer: signer, catalog: cat, purchase: pur, sandbox: sb, webhooks: wh,
		client: &http.Client{
			// A redirect is an answer: look at it, do not follow it.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		ops:     fuzzOperations(tb, cfg),
		byID:    map[string]fuzzOp{},
		entryID: uuid.New(),
	}
	for _, op := range e.ops {
		e.byID[op.id] = op
	}
	e.writesSQL = writesQuery(tb, pool)
	e.fixtures(tb)
	return e
}

// writesQuery builds one query that returns, per table, its row count and
// the newest xmin among its rows: an insert or delete changes the count,
// an update (a new row version) the xmin.
func writesQuery(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'goose_db_version' ORDER BY tablename`)
	require.NoError(tb, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(tb, err)
	require.NotEmpty(tb, tables)
	parts := make([]string, len(tables))
	for i, t := range tables {
		id := pgx.Identifier{t}.Sanitize()
		parts[i] = fmt.Sprintf("SELECT %s::text, count(*), coalesce(max(xmin::text::bigint), 0) FROM %s",
			quoteLiteral(t), id)
	}
	return strings.Join(parts, " UNION ALL ")
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

type tableState struct{ rows, xmin int64 }

func (e *fuzzEnv) writes(t testing.TB) map[string]tableState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := e.pool.Query(ctx, e.writesSQL)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]tableState{}
	for rows.Next() {
		var name string
		var s tableState
		require.NoError(t, rows.Scan(&name, &s.rows, &s.xmin))
		out[name] = s
	}
	require.NoError(t, rows.Err())
	return out
}

// fixtures creates, through the domain services (no rate limit of the API
// applies to them), an organizer with an event of seats and a webhook
// endpoint with a message, and a buyer with an order pending payment at
// the sandbox.
func (e *fuzzEnv) fixtures(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	e.orgID, e.buyerID = uuid.New(), uuid.New()
	var err error
	e.orgToken, err = auth.Mint(jwtSecret, auth.Identity{UserID: uuid.New(), Role: auth.RoleOrganizer, OrganizerID: e.orgID}, 48*time.Hour)
	require.NoError(tb, err)
	e.buyerToken, err = auth.Mint(jwtSecret, auth.Identity{UserID: e.buyerID, Role: auth.RoleBuyer}, 48*time.Hour)
	require.NoError(tb, err)
	ev, err := e.catalog.CreateEvent(ctx, catalog.EventParams{
		OrganizerID: e.orgID, Name: "Fuzz Night", StartsAt: time.Now().Add(30 * 24 * time.Hour), Currency: "eur", Cell: "default",
		Sections: []catalog.Section{{Name: "Floor", Rows: 4, SeatsPerRow: 50, PriceMinor: 5000}},
	})
	require.NoError(tb, err)
	e.eventID = ev.ID
	seats, err := e.catalog.Seats(ctx, ev.ID)
	require.NoError(tb, err)
	for _, s := range seats {
		e.seats = append(e.seats, s.ID)
	}
	e.newOrder(tb)
	e.newEndpoint(tb)
	key, _, err := apikey.NewStore(e.pool).Create(ctx, e.orgID, "fuzz")
	require.NoError(tb, err)
	e.apiKeyID = key.ID
	q := sqlcgen.New()
	e.messageID, err = q.WebhookMessageInsert(ctx, e.pool, sqlcgen.WebhookMessageInsertParams{
		ID: uuid.Must(uuid.NewV7()), OrganizerID: e.orgID, EventType: "order.paid",
		Payload:   []byte(`{"type":"order.paid","timestamp":"2026-01-01T00:00:00Z","data":{}}`),
		SourceKey: uuid.NewString(), CreatedAt: time.Now(),
	})
	require.NoError(tb, err)
	_, err = q.WebhookDeliveryFanOut(ctx, e.pool, sqlcgen.WebhookDeliveryFanOutParams{MessageID: e.messageID, OrganizerID: e.orgID, EventType: "order.paid"})
	require.NoError(tb, err)
}

// newOrder gives the buyer a fresh order pending payment, on an event of
// its own (so the fixture never runs out of seats nor meets a seat
// limit), with its intent at the sandbox, as the payments consumer
// creates it.
func (e *fuzzEnv) newOrder(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	ev, err := e.catalog.CreateEvent(ctx, catalog.EventParams{
		OrganizerID: e.orgID, Name: "Fuzz Order", StartsAt: time.Now().Add(30 * 24 * time.Hour), Currency: "eur", Cell: "default",
		Sections: []catalog.Section{{Name: "Floor", Rows: 1, SeatsPerRow: 1, PriceMinor: 5000}},
	})
	require.NoError(tb, err)
	seats, err := e.catalog.Seats(ctx, ev.ID)
	require.NoError(tb, err)
	hold, err := e.purchase.Hold(ctx, purchase.HoldParams{
		UserID: e.buyerID, EventID: ev.ID, SeatIDs: []uuid.UUID{seats[0].ID}, IdempotencyKey: uuid.NewString(),
	})
	require.NoError(tb, err)
	in, err := e.sandbox.CreateIntent(ctx, payments.CreateIntentParams{
		OrderID: hold.OrderID, AmountMinor: 5000, Currency: "eur", IdempotencyKey: "authorize:" + uuid.NewString(),
	})
	require.NoError(tb, err)
	_, err = sqlcgen.New().PaymentUpsertIntent(ctx, e.pool, sqlcgen.PaymentUpsertIntentParams{
		OrderID: hold.OrderID, Provider: "sandbox", PaymentIntentID: in.ID, ClientSecret: in.ClientSecret,
		Status: string(in.Status), AmountMinor: in.AmountMinor, Currency: in.Currency,
	})
	require.NoError(tb, err)
	e.orderID, e.intentID = hold.OrderID, in.ID
}

func (e *fuzzEnv) newEndpoint(tb testing.TB) {
	tb.Helper()
	ep, err := e.webhooks.Create(context.Background(), e.orgID, webhooks.EndpointParams{URL: "https://hooks.example.com/boxoffice"})
	require.NoError(tb, err)
	e.endpointID = ep.ID
}

// resolve maps op to an operation, or to a raw method ("" op.id).
func (e *fuzzEnv) resolve(op string) fuzzOp {
	if o, ok := e.byID[op]; ok {
		return o
	}
	if slices.Contains(rawMethods, op) {
		return fuzzOp{method: op}
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(op))
	n := int(h.Sum32() % uint32(len(e.ops)+len(rawMethods)))
	if n < len(e.ops) {
		return e.ops[n]
	}
	return fuzzOp{method: rawMethods[n-len(e.ops)]}
}

// substitute replaces the fixture placeholders in b.
func (e *fuzzEnv) substitute(b []byte) []byte {
	if !bytes.Contains(b, []byte("$")) {
		return b
	}
	seat := e.seats[e.nextSeat%len(e.seats)]
	e.nextSeat++
	return []byte(strings.NewReplacer(
		"$EVENT", e.eventID.String(), "$SEAT", seat.String(), "$ORDER", e.orderID.String(),
		"$INTENT", e.intentID, "$ENDPOINT", e.endpointID.String(), "$MESSAGE", e.messageID.String(),
		"$BUYER", e.buyerID.String(),
	).Replace(string(b)))
}

// escapeQuery percent-encodes the bytes a URL's query cannot hold, and
// keeps the rest (including % and malformed escapes) as sent.
func escapeQuery(q string) string {
	var b strings.Builder
	for i := 0; i < len(q); i++ {
		c := q[i]
		if c > 0x20 && c < 0x7f && c != '#' && c != '"' && c != '<' && c != '>' && c != '\\' &&
			c != '^' && c != '`' && c != '{' && c != '|' && c != '}' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// rawPath makes a path of p: each segment percent-encoded.
func rawPath(p string) string {
	segs := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return "/" + strings.Join(segs, "/")
}

// headerValue drops the bytes no header value may hold (the client would
// refuse the request) and bounds its length.
func headerValue(v string) string {
	if len(v) > maxHeader {
		v = v[:maxHeader]
	}
	return strings.Map(func(r rune) rune {
		if (r < 0x20 && r != '\t') || r == 0x7f {
			return -1
		}
		return r
	}, strings.ToValidUTF8(v, "\uFFFD"))
}

// headerBytes is headerValue that keeps bytes that are not UTF-8 (header
// values are bytes: obs-text is allowed).
func headerBytes(v string) string {
	if len(v) > maxHeader {
		v = v[:maxHeader]
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if (c < 0x20 && c != '\t') || c == 0x7f {
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// internals are texts that only SQL, pgx, the JSON decoder or the Go
// runtime write: none may reach a client unless the client sent it.
var internals = []string{
	"SQLSTATE", "pgx", "pgconn", "invalid character", "cannot unmarshal", "Go value", "Go struct",
	"unexpected end of JSON input", "invalid UUID", "runtime error", "goroutine ", "violates", "constraint",
}

// request builds the HTTP request of in; inputs (everything the client
// sent) are returned for the echo checks.
func (e *fuzzEnv) request(ctx context.Context, in fuzzInput) (*http.Request, fuzzOp, []string, error) {
	op := e.resolve(in.op)
	path := rawPath(string(e.substitute([]byte(in.param))))
	if op.id != "" {
		path = op.path
		for _, p := range op.params {
			v := in.param
			if in.sel&selParam == 0 {
				v = fuzzParamFixtures[p](e)
			}
			path = strings.Replace(path, "{"+p+"}", url.PathEscape(v), 1)
		}
	}
	target := e.srv.URL + path
	if in.query != "" {
		target += "?" + escapeQuery(in.query)
	}
	body := e.substitute(in.body)
	var rd io.Reader
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, op.method, target, rd)
	if err != nil {
		return nil, op, nil, err
	}
	slot := in.sel & 7
	hdr := headerBytes(in.hdr)
	if slot == fuzzHdrContentType || slot == fuzzHdrAccept || slot == fuzzHdrCorrelation || slot == fuzzHdrAuthorization {
		hdr = headerValue(in.hdr)
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	switch in.who % 4 {
	case whoBuyer:
		req.Header.Set("Authorization", "Bearer "+e.buyerToken)
	case whoOrganizer:
		req.Header.Set("Authorization", "Bearer "+e.orgToken)
	case whoGarbage:
		req.Header.Set("Authorization", "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.")
	}
	req.Header.Set("Idempotency-Key", uuid.NewString())
	adm, _, err := e.signer.Issue(e.buyerID, e.eventID, "default")
	if err != nil {
		return nil, op, nil, err
	}
	req.Header.Set("X-Admission-Token", adm)
	if in.sel&selSign != 0 {
		req.Header.Set("Stripe-Signature", payments.SignWebhook(body, webhookSecret, time.Now()))
	}
	name := fuzzHeaders[slot]
	if hdr == "" {
		req.Header.Del(name)
	} else {
		req.Header.Set(name, hdr)
	}
	return req, op, []string{path, in.param, in.query, in.hdr, string(body)}, nil
}

// fuzzVerbose logs every answer (BOXOFFICE_FUZZ_VERBOSE=1), to see how deep
// the seeds reach.
var fuzzVerbose = os.Getenv("BOXOFFICE_FUZZ_VERBOSE") == "1"

type fuzzAnswer struct {
	status int
	header http.Header
	body   []byte
	stream bool
}

func (a fuzzAnswer) String() string {
	b := a.body
	if len(b) > 2048 {
		b = append(slices.Clone(b[:2048]), "…"...)
	}
	return fmt.Sprintf("%d %s %s", a.status, a.header.Get("Content-Type"), b)
}

func (e *fuzzEnv) do(req *http.Request, cancel context.CancelFunc) (fuzzAnswer, error) {
	res, err := e.client.Do(req)
	if err != nil {
		return fuzzAnswer{}, err
	}
	defer res.Body.Close()
	a := fuzzAnswer{status: res.StatusCode, header: res.Header}
	if ct, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); ct == "text/event-stream" && res.StatusCode == http.StatusOK {
		a.stream = true
		cancel() // a stream is accepted once its headers arrive
		return a, nil
	}
	a.body, err = io.ReadAll(io.LimitReader(res.Body, maxBody+1))
	return a, err
}

// run sends in and checks the answer against invariant 7.
func (e *fuzzEnv) run(t *testing.T, in fuzzInput) {
	ctx, cancel := context.WithTimeout(context.Background(), fuzzTimeout)
	defer cancel()
	req, op, inputs, err := e.request(ctx, in)
	if err != nil {
		t.Skipf("not a request: %v", err) // the client cannot send it
	}
	what := fmt.Sprintf("%s %s (operation %q)", req.Method, truncate(req.URL.RequestURI(), 300), op.id)
	before := e.writes(t)
	a, err := e.do(req, cancel)
	if err != nil && !a.stream {
		t.Fatalf("%s: no answer within %s: %v", what, fuzzTimeout, err)
	}
	if fuzzVerbose {
		t.Logf("%s: %s", what, a)
	}
	if finding := e.check(t, req.Method, a, inputs, before); finding != "" {
		t.Fatalf("%s: %s", what, finding)
	}
	if a.status >= 200 && a.status < 300 {
		e.replaceConsumed(t, op, in)
	}
}

// check returns what in the answer a breaks invariant 7, or "".
func (e *fuzzEnv) check(t *testing.T, method string, a fuzzAnswer, inputs []string, before map[string]tableState) string {
	switch {
	case a.status >= 500:
		return fmt.Sprintf("a 5xx: %s", a)
	case len(a.body) > maxBody:
		return fmt.Sprintf("the answer is over %d bytes", maxBody)
	case a.status < 400:
		return ""
	}
	if finding := problemFinding(method, a, inputs); finding != "" {
		return finding
	}
	if after := e.writes(t); !maps(before, after) {
		return fmt.Sprintf("rejected with %d but wrote %s: %s", a.status, diff(before, after), a)
	}
	return ""
}

// problemFinding returns what makes the error answer a not a bounded
// problem without internals, or "".
func problemFinding(method string, a fuzzAnswer, inputs []string) string {
	ct, _, err := mime.ParseMediaType(a.header.Get("Content-Type"))
	if err != nil || ct != "application/problem+json" {
		return fmt.Sprintf("error %d is not application/problem+json: %s", a.status, a)
	}
	if len(a.body) > maxErrorBody {
		return fmt.Sprintf("error %d of %d bytes (more than %d): %s", a.status, len(a.body), maxErrorBody, a)
	}
	if method == http.MethodHead {
		return ""
	}
	var p struct {
		Type   *string  `json:"type"`
		Title  *string  `json:"title"`
		Status *float64 `json:"status"`
	}
	if err := json.Unmarshal(a.body, &p); err != nil {
		return fmt.Sprintf("error %d is not a JSON problem (%v): %s", a.status, err, a)
	}
	if p.Type == nil || *p.Type == "" || p.Title == nil || *p.Title == "" || p.Status == nil {
		return fmt.Sprintf("problem %d lacks type, title or status: %s", a.status, a)
	}
	if int(*p.Status) != a.status {
		return fmt.Sprintf("problem status %v is not the HTTP status %d: %s", *p.Status, a.status, a)
	}
	for _, s := range internals {
		if bytes.Contains(a.body, []byte(s)) && !slices.ContainsFunc(inputs, func(in string) bool { return strings.Contains(in, s) }) {
			return fmt.Sprintf("problem %d shows internal text %q: %s", a.status, s, a)
		}
	}
	if body := inputs[len(inputs)-1]; len(body) >= 64 {
		esc, _ := json.Marshal(body)
		if bytes.Contains(a.body, []byte(body)) || bytes.Contains(a.body, esc[1:len(esc)-1]) {
			return fmt.Sprintf("problem %d echoes the request body: %s", a.status, a)
		}
	}
	return ""
}

// replaceConsumed replaces a fixture a successful request used up, so
// that later inputs still reach deep paths.
func (e *fuzzEnv) replaceConsumed(t *testing.T, op fuzzOp, in fuzzInput) {
	if in.sel&selParam != 0 {
		return
	}
	switch op.id {
	case "delete-webhook-endpoint":
		e.newEndpoint(t)
	case "cancel-order", "refund-order", "sandbox-authorize-payment-intent", "sandbox-decline-payment-intent",
		"sandbox-challenge-payment-intent":
		// A challenged intent awaits the buyer's answer: a second
		// challenge is refused, and the sandbox logs the refusal in its
		// request log, as a provider does (a record of what was asked of
		// it, not a change the refused request made).
		e.newOrder(t)
	}
}

func maps(a, b map[string]tableState) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func diff(before, after map[string]tableState) string {
	var out []string
	for k, v := range after {
		if w := before[k]; w != v {
			out = append(out, fmt.Sprintf("%s (rows %d→%d, xmin %d→%d)", k, w.rows, v.rows, w.xmin, v.xmin))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// yamlToJSON decodes the OpenAPI YAML into v.
func yamlToJSON(doc []byte, v any) error {
	var m map[string]any
	if err := yaml.Unmarshal(doc, &m); err != nil {
		return err
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}
