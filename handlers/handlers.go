// Package handlers is the HTTP edge: huma operations mapping requests to
// the domain packages and domain errors to problems. operations.go declares
// every operation (what the OpenAPI document says of it, and its handler);
// each resource's file holds its inputs, outputs and handlers. Nothing here
// decides business rules.
package handlers

import (
	"context"
	"crypto/ed25519"
	"errors"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/domain/cells"
	"boxoffice/platform/admission"
	"boxoffice/platform/apikey"
	"boxoffice/platform/auth"
	"boxoffice/platform/db"
	"boxoffice/platform/payload"
	"boxoffice/platform/telemetry"
	"boxoffice/platform/verified"
)

// Config holds what the handlers need.
type Config struct {
	// Cells routes every event, order, payment intent and organizer to
	// the purchase cell that holds it, whose services then serve the
	// request; a one-cell process passes cells.Single. Required: New
	// panics without it. Of each cell, Catalog, Purchase and Room are
	// required by the routes of events, the waiting room, onsales, holds
	// and orders (a cell without a Room cannot admit or hold: the caller
	// builds the waiting room it wants, nothing is defaulted here). The
	// rest is optional: without Ingress /v1/webhooks/stripe answers 404,
	// without Webhooks the webhook routes answer 404, without Orders the
	// order event streams read their order every OrderStreamPoll, and the
	// sandbox's buyer actions under /v1/sandbox exist only when the first
	// cell has a Sandbox (BOXOFFICE_PAYMENTS=sandbox).
	Cells *cells.Router
	// Logger logs one line per request and every internal error. Required.
	Logger *slog.Logger
	// Bearer verifies Authorization bearer tokens. Required.
	Bearer *auth.Verifier
	// Admission issues and verifies admission tokens. Required.
	Admission *admission.Signer
	// TicketPublicKey is the Ed25519 key tickets are signed with
	// (tickets.Signer.PublicKey), served at /v1/ticket-signing-key; the API
	// never needs the private key. Defaults to none: the route answers 404.
	TicketPublicKey ed25519.PublicKey
	// Checks are the dependencies /readyz reports. Defaults to none.
	Checks []Check
	// Payments names the process's payment provider, "stripe" or
	// "sandbox", which /readyz reports: a deployment whose buyers can pay
	// themselves (the sandbox) must be seen to be one. Defaults to none:
	// not reported.
	Payments string
	// Registerer receives the API's metrics. They are not served on the
	// API's listener: serve exposes them on OPS_ADDR. Defaults to none.
	Registerer prometheus.Registerer
	// OrderStreamsPerOrder caps the order event streams open at once on
	// one order in this process; beyond it a stream is refused with a 429
	// problem before it starts. Negative: no cap. Defaults to 4.
	OrderStreamsPerOrder int
	// OrderStreamsPerUser caps the order event streams one user has open
	// at once in this process, like OrderStreamsPerOrder. Defaults to 16.
	OrderStreamsPerUser int
	// OrderStreamPoll is how often an order event stream reads its order
	// while nothing can wake it (no order feed, or one that cannot follow
	// the bus). Defaults to 250ms.
	OrderStreamPoll time.Duration
	// OrderStreamSafetyRead is how often an order event stream reads its
	// order while the cell's order feed is healthy (the events it
	// delivers are shown without a read): a bound on the wait should an
	// event ever be missed. Defaults to 1m.
	OrderStreamSafetyRead time.Duration
	// HoldsPerSecond is the holds one buyer may ask for per second in this
	// process (a token bucket of HoldBurst); beyond it a hold is refused
	// with a 429 problem and writes nothing. Negative: no limit. Defaults
	// to 5.
	HoldsPerSecond int
	// HoldBurst is how many holds one buyer may ask for at once. Defaults
	// to twice HoldsPerSecond.
	HoldBurst int
	// EventReadsPerSecond is the event and seat-map reads one client
	// address (an IPv6 /64) may make per second in this process; beyond it
	// a read is refused with a 429 problem. Negative: no limit (behind a
	// proxy that limits). Defaults to 200.
	EventReadsPerSecond int
	// CORSOrigins are the origins (scheme://host[:port], each
	// ValidCORSOrigin) whose browser pages may call the API (cors.go).
	// Defaults to none: no CORS headers, so browsers refuse cross-origin
	// calls.
	CORSOrigins []string
	// DescribeSandbox registers the sandbox's buyer actions even when no
	// cell has a Sandbox, so that the document lists them (tagged
	// Sandbox, x-test-mode-only): `boxoffice openapi` sets it for the
	// committed openapi.yaml, from which the typed clients are generated.
	// Without a sandbox they answer 404. A serving process leaves it
	// false: its own document (/openapi.json) lists them only where the
	// sandbox is. Defaults to false.
	DescribeSandbox bool
}

// Handlers implements the API's operations.
type Handlers struct {
	cfg     Config
	logger  *slog.Logger
	metrics *httpMetrics
	cells   *cells.Router
	limits  *limits
	// seatMaps are the encoded seat maps (representation.go).
	seatMaps *seatMapCache
	// bearers are the verified bearer tokens.
	bearers *verified.Cache[auth.Identity]
	// heartbeats signal the open order event streams' heartbeats
	// (stream_clock.go).
	heartbeats *streamClock
}

// New returns Handlers for cfg. It panics when cfg.Cells is nil: every
// route that serves a record needs the cell that holds it.
func New(cfg Config) *Handlers {
	if cfg.Cells == nil {
		panic("handlers: Config.Cells is required")
	}
	return &Handlers{cfg: cfg, logger: cfg.Logger.With("component", "http"), metrics: newHTTPMetrics(cfg.Registerer), cells: cfg.Cells,
		limits: newLimits(cfg), seatMaps: newSeatMapCache(), bearers: verified.New[auth.Identity](),
		heartbeats: newStreamClock(orderEventsHeartbeatTick, int(orderEventsHeartbeat/orderEventsHeartbeatTick))}
}

// Version is the API version shown in the OpenAPI document.
const Version = "1.0.0"

// NewAPI returns the huma API on mux with every operation registered: the
// single constructor used by `serve`, `dev`, `openapi` and the tests.
func (h *Handlers) NewAPI(mux *http.ServeMux) huma.API {
	cfg := huma.DefaultConfig("Boxoffice API", Version)
	cfg.Info.Description = "Assigned-seat ticketing for high-demand onsales. " +
		"Errors are RFC 9457 problems with a stable `type`. " +
		"Authenticate with `Authorization: Bearer <token>`: a JWT of the deployment's identity provider " +
		"(RS256, ES256 or EdDSA, from its JWKS; claims iss, aud, sub, exp, role, and org for organizers; " +
		"exp, iat and nbf as JSON numbers, checked with " + auth.ClockSkew.String() + " of clock skew), " +
		"an HS256 JWT in development, or an organizer API key (`bo_live_…`, see /v1/api-keys)."
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", BearerFormat: "JWT"},
	}
	cfg.CreateHooks = nil // no $schema links in response bodies
	cfg.DocsPath = ""     // huma's page loads its scripts from a CDN; ours is self-contained
	cfg.Servers = servers
	// Every JSON body leaves through payload: a nil slice is [], as the
	// document's arrays (never nullable) say.
	jsonFormat := huma.Format{Marshal: payload.Encode, Unmarshal: huma.DefaultJSONFormat.Unmarshal}
	cfg.Formats = map[string]huma.Format{"application/json": jsonFormat, "json": jsonFormat}
	api := humago.New(mux, cfg)
	mux.HandleFunc("GET /docs", serveReference)
	mux.HandleFunc("GET /{$}", serveRoot)
	mux.HandleFunc("GET /problems", serveProblems)
	mux.HandleFunc("GET /problems/{name}", serveProblems)
	api.UseMiddleware(h.metrics.middleware, labelRole, deprecationHeaders, h.authenticate(api))
	h.Register(api)
	finishDocument(api)
	return api
}

// Handler returns the whole HTTP handler: the API plus correlation ids,
// request logging, panic recovery, and problems for unknown routes and
// methods (statusRecorder).
func (h *Handlers) Handler() http.Handler {
	mux := http.NewServeMux()
	h.NewAPI(mux)
	return h.middleware(h.cors(telemetry.HTTPHandler(mux, "boxoffice-api")))
}

const roleKey = "role"

// secured marks op as needing a bearer token with one of roles.
//
// An operation for buyers is for buyers alone: it panics (a programmer
// error, at registration) when RoleBuyer comes with another role. A
// buyer's records (orders, holds, admissions) are found by the token's
// sub, and the identity provider's subs are one space shared by every
// role: an organizer's or scanner's token whose sub is a buyer's id must
// not read that buyer's orders, so such tokens get 403 on every buyer
// operation. Refusing them is simpler to check than namespacing subs by
// role in every query, and loses nothing: organizers see their events'
// orders through their own operations, which look records up by org.
func secured(op huma.Operation, roles ...auth.Role) huma.Operation {
	if slices.Contains(roles, auth.RoleBuyer) && len(roles) > 1 {
		panic("handlers: " + op.OperationID + " serves buyers and other roles; buyer operations are for buyers only")
	}
	op.Security = []map[string][]string{{"bearer": {}}}
	if op.Metadata == nil {
		op.Metadata = map[string]any{}
	}
	op.Metadata[roleKey] = roles
	op.Errors = append(op.Errors, http.StatusUnauthorized, http.StatusForbidden)
	return op
}

// labelRole names the operation as the database work's role
// (db.WithRole), so that a cost tracer can tell what each operation
// spends.
func labelRole(ctx huma.Context, next func(huma.Context)) {
	next(huma.WithContext(ctx, db.WithRole(ctx.Context(), "api "+ctx.Operation().OperationID)))
}

// authenticate verifies the bearer token of every secured operation before
// its input is even parsed, and stores the identity in the context.
func (h *Handlers) authenticate(api huma.API) func(huma.Context, func(huma.Context)) {
	return func(ctx huma.Context, next func(huma.Context)) {
		roles, ok := ctx.Operation().Metadata[roleKey].([]auth.Role)
		if !ok {
			next(ctx)
			return
		}
		token, found := bearerToken(ctx.Header("Authorization"))
		if !found {
			ctx.SetHeader("WWW-Authenticate", `Bearer`)
			writeProblem(api, ctx, problem(http.StatusUnauthorized, TypeUnauthorized, "A bearer token is required."))
			return
		}
		var id auth.Identity
		var err error
		if apikey.IsKey(token) {
			// Never cached: a revoked key is refused by the next request.
			id, err = h.verifyAPIKey(ctx.Context(), token)
		} else {
			id, err = h.verifyBearer(token, time.Now())
		}
		if err != nil && !errors.Is(err, auth.ErrInvalidToken) {
			// The organizer's cell did not answer: not the caller's fault.
			h.logger.WarnContext(ctx.Context(), "api key not checked: purchase cell unavailable",
				"correlation_id", CorrelationID(ctx.Context()), "error", err.Error())
			ctx.SetHeader("Retry-After", "5")
			writeProblem(api, ctx, problem(http.StatusServiceUnavailable, TypeCellUnavailable,
				"The purchase cell that serves this is not answering; other events are not affected. Try again shortly."))
			return
		}
		if err != nil {
			h.logger.InfoContext(ctx.Context(), "bearer token rejected",
				"correlation_id", CorrelationID(ctx.Context()), "reason", err.Error())
			ctx.SetHeader("WWW-Authenticate", `Bearer error="invalid_token"`)
			writeProblem(api, ctx, problem(http.StatusUnauthorized, TypeUnauthorized, "The bearer token is invalid or expired."))
			return
		}
		for _, r := range roles {
			if id.Role == r {
				next(huma.WithValue(ctx, identityKey{}, id))
				return
			}
		}
		writeProblem(api, ctx, problem(http.StatusForbidden, TypeForbidden, "This operation is not available to your role."))
	}
}

// verifyBearer returns the identity of token as h.cfg.Bearer.Verify would
// at now, remembering verified tokens until they expire (package
// verified): a buyer polling the waiting room presents the same token on
// every poll, and verifying it each time was 14% of the server's CPU.
func (h *Handlers) verifyBearer(token string, now time.Time) (auth.Identity, error) {
	if id, ok := h.bearers.Get(token, now); ok {
		return id, nil
	}
	id, exp, err := h.cfg.Bearer.VerifyUntil(token)
	if err != nil {
		return id, err
	}
	h.bearers.Put(token, id, exp)
	return id, nil
}

// bearerToken is the token of an Authorization header of the Bearer
// scheme, whose name is case-insensitive (RFC 9110 §11.1).
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	token = strings.TrimLeft(token, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

type identityKey struct{}

// identity returns the verified bearer of a secured operation.
func identity(ctx context.Context) auth.Identity {
	id, _ := ctx.Value(identityKey{}).(auth.Identity)
	return id
}

func writeProblem(api huma.API, ctx huma.Context, p *Problem) {
	ctx.SetHeader("Content-Type", "application/problem+json")
	ctx.SetStatus(p.Status)
	_ = api.Marshal(ctx.BodyWriter(), "application/json", p)
}

// internal logs err once, with the request's correlation id, and returns
// the generic 500 problem: no internal text reaches the client. A write the
// database refused because this process's region epoch is fenced is the
// 503 problem TypeFenced instead.
func (h *Handlers) internal(ctx context.Context, msg string, err error, attrs ...any) error {
	if errors.Is(err, context.Canceled) {
		return problem(499, "about:blank", "The client went away.")
	}
	if db.IsFenced(err) {
		h.logger.WarnContext(ctx, msg+": refused, this process's region epoch is fenced", "correlation_id", CorrelationID(ctx))
		return problem(http.StatusServiceUnavailable, TypeFenced,
			"This region no longer serves writes: it was failed over to another region. Nothing was changed.")
	}
	if errors.Is(err, context.DeadlineExceeded) || db.IsBusy(err) {
		// Overloaded, not broken: a load this server bounds took too long,
		// or a lock the request needed was held elsewhere past
		// DATABASE_LOCK_TIMEOUT (or a statement ran past
		// DATABASE_STATEMENT_TIMEOUT). Nothing was written: the
		// transaction rolled back.
		h.logger.WarnContext(ctx, msg+": timed out", append(attrs, "correlation_id", CorrelationID(ctx), "error", err.Error())...)
		return huma.ErrorWithHeaders(problem(http.StatusServiceUnavailable, TypeUnavailable,
			"The server is too busy to answer in time. Try again shortly; a retried hold with the same Idempotency-Key returns the original order."),
			retryAfter(2*time.Second))
	}
	if db.IsUnavailable(err) {
		attrs = append(attrs, "correlation_id", CorrelationID(ctx), "error", err.Error())
		h.logger.WarnContext(ctx, msg+": database unavailable", attrs...)
		return cellUnavailable()
	}
	attrs = append(attrs, "correlation_id", CorrelationID(ctx), "error", err.Error())
	h.logger.ErrorContext(ctx, msg, attrs...)
	return problem(http.StatusInternalServerError, TypeInternal, "The server could not complete the request.")
}

func parseUUID(s, location string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, invalid(location, "expected a UUID")
	}
	return id, nil
}

// requestKey is the context key of a request's *request.
type requestKey struct{}

// request is what the middleware knows of one request, in one allocation:
// its correlation id, when it arrived, and the recorder of its status.
type request struct {
	rec   statusRecorder
	cid   string
	start time.Time
	// cidHeader backs the X-Correlation-Id header's value, so that
	// setting it allocates nothing more.
	cidHeader [1]string
}

func requestOf(ctx context.Context) *request {
	r, _ := ctx.Value(requestKey{}).(*request)
	return r
}

// requestStart is when the middleware received the request: before the
// body was read, authentication and validation ran, so that a latency
// measured from it includes the time a request waited for a CPU on its way
// to the handler. time.Now() outside the middleware.
func requestStart(ctx context.Context) time.Time {
	if r := requestOf(ctx); r != nil {
		return r.start
	}
	return time.Now()
}

// correlationPattern is what an X-Correlation-Id must match (the OpenAPI
// document says so); validCorrelationID checks it without a regexp.
var correlationPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)

// validCorrelationID reports whether id matches correlationPattern.
func validCorrelationID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := range len(id) {
		switch c := id[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// CorrelationID returns the id of the buyer journey the request belongs to:
// the client's X-Correlation-Id when well-formed, else a fresh UUID.
func CorrelationID(ctx context.Context) string {
	if r := requestOf(ctx); r != nil {
		return r.cid
	}
	return ""
}

// statusRecorder records the status for the request log, and turns the
// mux's own error answers into problems (see WriteHeader).
type statusRecorder struct {
	http.ResponseWriter
	method string
	status int
	// swallow drops the body of an answer WriteHeader replaced.
	swallow bool
}

// WriteHeader writes the header of status. The only text/plain 404 and 405
// answers are the ServeMux's own (http.Error) for a request no operation
// matches: they are replaced here, once, by a problem (405 keeps the
// Allow header the mux computed), so that matching a route is done once
// per request.
func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	if (status == http.StatusNotFound || status == http.StatusMethodNotAllowed) &&
		strings.HasPrefix(r.Header().Get("Content-Type"), "text/plain") {
		r.Header().Del("X-Content-Type-Options")
		p := problem(http.StatusNotFound, TypeNotFound, "No such resource.")
		if status == http.StatusMethodNotAllowed {
			p = problem(status, TypeMethodNotAllowed, "This resource does not support the method "+strconv.Quote(r.method)+"; Allow lists those it does.")
		}
		writeProblemTo(r.ResponseWriter, p)
		r.swallow = true
		return
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	if r.swallow {
		return len(p), nil
	}
	return r.ResponseWriter.Write(p)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// middleware assigns the correlation id, recovers panics as 500 problems,
// and logs one line per request. It never logs headers, bodies or query
// strings, so no token reaches the logs. What it keeps of a request is
// one allocation (request) and one context; the line's attributes are
// slog.Attrs, so that neither a line written nor one the level drops
// boxes its values (BenchmarkMiddleware).
func (h *Handlers) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := &request{start: time.Now(), cid: r.Header.Get("X-Correlation-Id")}
		if !validCorrelationID(req.cid) {
			req.cid = uuid.NewString()
		}
		req.cidHeader[0] = req.cid
		w.Header()["X-Correlation-Id"] = req.cidHeader[:]
		ctx := context.WithValue(r.Context(), requestKey{}, req)
		rec := &req.rec
		*rec = statusRecorder{ResponseWriter: w, method: r.Method, status: http.StatusOK}
		defer func() {
			if v := recover(); v != nil {
				h.logger.ErrorContext(ctx, "panic in handler", "correlation_id", req.cid, "panic", v)
				writeProblemTo(rec, problem(http.StatusInternalServerError, TypeInternal, "The server could not complete the request."))
			}
			level := slog.LevelInfo
			if rec.status >= 500 {
				level = slog.LevelError
			}
			h.logger.LogAttrs(ctx, level, "http request",
				slog.String("correlation_id", req.cid), slog.String("method", r.Method), slog.String("path", r.URL.Path),
				slog.Int("status", rec.status), slog.Float64("duration_ms", float64(time.Since(req.start).Microseconds())/1000))
		}()
		if headerLimit(r) {
			writeProblemTo(rec, problem(http.StatusRequestHeaderFieldsTooLarge, TypeHeadersTooLarge,
				"The request's headers are larger than "+strconv.Itoa(MaxHeaderBytes>>10)+" KiB."))
			return
		}
		next.ServeHTTP(rec, r.WithContext(ctx))
	})
}

// rootIndex is what GET / answers: where a newcomer who opens the API's
// URL goes next, instead of a 404.
var rootIndex = []byte(`{"name":"Boxoffice API","version":"` + Version + `",` +
	`"docs":"/docs","openapi":"/openapi.yaml","problems":"/problems","health":"/healthz","ready":"/readyz"}` + "\n")

// serveRoot answers GET / with rootIndex.
func serveRoot(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(rootIndex)
}
