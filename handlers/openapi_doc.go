package handlers

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"
)

// tagDescriptions declares every tag an operation uses, in the order the
// reference shows them. TestTheDocumentTheToolsRead fails on a tag used and not
// declared here.
var tagDescriptions = []*huma.Tag{
	{Name: "Events", Description: "An organizer's events and their seats: create an event, list yours, read its seat map, its sales and its orders."},
	{Name: "Waiting room", Description: "Join an onsale's waiting room and poll your place until you are admitted with an admission token."},
	{Name: "Holds", Description: "Hold seats with an admission token and an Idempotency-Key: the hold is the order, awaiting payment."},
	{Name: "Waitlist", Description: "A sold-out event's waitlist: join it for seats of a category, see your offer when seats come back, accept it before it expires (it then passes to the next buyer)."},
	{Name: "Orders", Description: "Your orders and their tickets; cancel one awaiting payment; follow one as it moves; the organizer's refunds."},
	{Name: "Tickets", Description: "What door scanners need to verify tickets offline: the signing key and the revocation list."},
	{Name: "Check-in", Description: "The door: scan a ticket once, upload offline scans in batches, count entries per gate."},
	{Name: "Onsale", Description: "An organizer's onsale settings: opening time, admission rate, per-buyer limit, hold lifetime, pause; revoke admissions."},
	{Name: "Webhooks", Description: "Signed, retried, replayable Standard Webhooks to the organizer's systems: endpoints, messages and their attempts."},
	{Name: "API keys", Description: "Organizer API keys for your own systems: create one (shown once), list them, revoke one at once."},
	{Name: "Webhook messages", Description: "What your webhook endpoints receive: one entry per message type, with its Standard Webhooks headers and body, and what your answer means. docs/webhooks.md says how to verify, deduplicate and acknowledge them."},
	{Name: "Payments", Description: "The payment provider's webhook: Stripe events, verified before they are read."},
	{Name: "Sandbox", Description: "Test mode only (x-test-mode-only): served only by a deployment run with the sandbox payment provider " +
		"(BOXOFFICE_PAYMENTS=sandbox, as `make run` does), where a developer plays the buyer's part at the provider. " +
		"Such a deployment's own /openapi.json lists them; one that talks to Stripe neither lists nor answers them (404)."},
	{Name: "Operations", Description: "Liveness and readiness, for load balancers and orchestrators."},
}

// servers say where the API is: a deployment serves these paths at its
// own origin; the default is where `make run` and `docker compose up`
// start it (api-1; compose's api-2 is on :8081).
var servers = []*huma.Server{{
	URL:         "{scheme}://{host}",
	Description: "Your deployment; by default the one `make run` starts.",
	Variables: map[string]*huma.ServerVariable{
		"scheme": {Default: "http", Enum: []string{"http", "https"}, Description: "https in production"},
		"host":   {Default: "localhost:8080", Description: "the API's host and port"},
	},
}}

// finishDocument completes the OpenAPI document once every operation is
// registered: the declared tags, and huma's patternDescription (the words
// of a pattern's validation message, not a JSON Schema keyword) moved to
// an x- extension where the tools expect extensions. The messages were
// computed from it at registration and stay as they are.
func finishDocument(api huma.API) {
	doc := api.OpenAPI()
	doc.Tags = tagDescriptions
	declareWebhooks(api)
	addRequestExamples(doc)
	declareCommonResponses(doc)
	declareProblemTypes(doc)
	declareDeprecationHeaders(doc)
	declareCorrelationHeader(doc) // after: the responses added above carry it too
	openResponses(doc)
	var visit func(s *huma.Schema)
	seen := map[*huma.Schema]bool{}
	visit = func(s *huma.Schema) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		if s.PatternDescription != "" {
			if s.Extensions == nil {
				s.Extensions = map[string]any{}
			}
			s.Extensions["x-pattern-description"] = s.PatternDescription
			s.PatternDescription = ""
		}
		visit(s.Items)
		visit(s.Not)
		for _, p := range s.Properties {
			visit(p)
		}
		for _, list := range [][]*huma.Schema{s.OneOf, s.AnyOf, s.AllOf} {
			for _, sub := range list {
				visit(sub)
			}
		}
		if ap, ok := s.AdditionalProperties.(*huma.Schema); ok {
			visit(ap)
		}
	}
	if doc.Components != nil && doc.Components.Schemas != nil {
		for _, s := range doc.Components.Schemas.Map() {
			visit(s)
		}
	}
	for _, item := range doc.Paths {
		for _, op := range operations(item) {
			for _, p := range op.Parameters {
				visit(p.Schema)
			}
		}
	}
}

// openResponses leaves the schemas of what the server sends — response
// bodies, order stream events, webhook messages — open to new fields (no
// additionalProperties: false), so that a field added in a minor version
// (docs/versioning.md) breaks no client that validates what it receives;
// and their arrays are arrays, not huma's default [array, null]: the
// server never sends null for a list (payload.Encode writes a nil slice
// as []). Request schemas keep huma's nullable arrays (null reads as an
// absent list; refusing it now would break a client that sends it).
// Request bodies stay closed: the server refuses a field it does not know
// (a misspelt optional field is a 422, not silently ignored), and opening
// them later is not a breaking change, while closing them would be. A
// schema used by both a request and a response stays closed; the
// document has none (TestResponseSchemasAreOpen). The handlers' contract
// tests still refuse an undeclared field in a response: they validate
// against the document closed again (contract_test.go).
func openResponses(doc *huma.OpenAPI) {
	named := doc.Components.Schemas.Map()
	var reach func(s *huma.Schema, into map[*huma.Schema]bool)
	reach = func(s *huma.Schema, into map[*huma.Schema]bool) {
		if s == nil || into[s] {
			return
		}
		into[s] = true
		if name, ok := strings.CutPrefix(s.Ref, "#/components/schemas/"); ok {
			reach(named[name], into)
		}
		reach(s.Items, into)
		for _, p := range s.Properties {
			reach(p, into)
		}
		for _, list := range [][]*huma.Schema{s.OneOf, s.AnyOf, s.AllOf} {
			for _, sub := range list {
				reach(sub, into)
			}
		}
		if ap, ok := s.AdditionalProperties.(*huma.Schema); ok {
			reach(ap, into)
		}
		for _, ext := range s.Extensions {
			if sub, ok := ext.(*huma.Schema); ok {
				reach(sub, into)
			}
		}
	}
	requests, responses := map[*huma.Schema]bool{}, map[*huma.Schema]bool{}
	for _, item := range doc.Paths {
		for _, op := range operations(item) {
			if op.RequestBody != nil {
				for _, mt := range op.RequestBody.Content {
					reach(mt.Schema, requests)
				}
			}
			for _, p := range op.Parameters {
				reach(p.Schema, requests)
			}
			for _, res := range op.Responses {
				for _, mt := range res.Content {
					reach(mt.Schema, responses)
				}
			}
		}
	}
	for _, item := range doc.Webhooks {
		for _, op := range operations(item) {
			for _, mt := range op.RequestBody.Content {
				reach(mt.Schema, responses)
			}
		}
	}
	for s := range responses {
		if requests[s] {
			continue
		}
		if s.AdditionalProperties == false {
			s.AdditionalProperties = nil
		}
		if s.Type == huma.TypeArray {
			s.Nullable = false
		}
	}
}

// commonResponses are what any operation may answer besides its own
// declared errors: the platform's, not the operation's (the edge reads
// headers and bodies before any handler runs; the database may be
// overloaded under any query). Handler tests validate every response
// against the document (contract_test.go), so a status written here that
// the server cannot send, or one it sends that is missing, is seen.
var commonResponses = []struct {
	status int
	// bodyOnly: only operations that take a request body.
	bodyOnly    bool
	description string
}{
	{http.StatusBadRequest, false, "Malformed: a header, a query parameter or the body cannot be parsed. Nothing was changed."},
	{http.StatusRequestTimeout, true, "The request body did not arrive in time. Nothing was changed; send it again (with the same Idempotency-Key where there is one)."},
	{http.StatusRequestEntityTooLarge, true, "The request body is larger than this operation accepts. Nothing was changed."},
	{http.StatusUnsupportedMediaType, true, "The request body is not application/json. Nothing was changed."},
	{http.StatusRequestHeaderFieldsTooLarge, false, "The request's headers are too large. Nothing was changed."},
	{http.StatusServiceUnavailable, false, "Unavailable for a moment — the database is overloaded or a lock waited too long, or this region " +
		"was failed over (/problems/fenced). Nothing was changed; retry after Retry-After."},
}

// budgetedOperations answer RateLimit and RateLimit-Policy headers, on
// success (their output declares them) and on 429.
var budgetedOperations = []string{"create-hold", "create-best-available-hold", "join-waiting-room", "get-waiting-room"}

// declareCommonResponses adds commonResponses to every operation that does
// not declare them itself, and documents the headers of the answers that
// carry them: WWW-Authenticate on 401, Retry-After on 429 and 503.
func declareCommonResponses(doc *huma.OpenAPI) {
	problemBody := func() map[string]*huma.MediaType {
		return map[string]*huma.MediaType{"application/problem+json": {Schema: &huma.Schema{Ref: "#/components/schemas/Problem"}}}
	}
	header := func(desc string) *huma.Param {
		return &huma.Param{Description: desc, Schema: &huma.Schema{Type: "string"}}
	}
	for _, item := range doc.Paths {
		for _, op := range operations(item) {
			if op.Responses == nil {
				op.Responses = map[string]*huma.Response{}
			}
			for _, c := range commonResponses {
				code := strconv.Itoa(c.status)
				if _, ok := op.Responses[code]; ok || (c.bodyOnly && op.RequestBody == nil) {
					continue
				}
				op.Responses[code] = &huma.Response{Description: c.description, Content: problemBody()}
			}
			for code, res := range op.Responses {
				if res.Headers == nil {
					res.Headers = map[string]*huma.Param{}
				}
				switch code {
				case "401":
					res.Headers["WWW-Authenticate"] = header("The scheme to authenticate with (RFC 6750): Bearer, with error=\"invalid_token\" when the token was refused.")
				case "429", "503":
					if res.Headers["Retry-After"] == nil {
						res.Headers["Retry-After"] = header("Seconds to wait before retrying.")
					}
					if code == "429" && slices.Contains(budgetedOperations, op.OperationID) {
						res.Headers["RateLimit-Policy"] = header("The budget this request exceeded (IETF httpapi RateLimit draft), as on the operation's success.")
						res.Headers["RateLimit"] = header("What is left of it: r=0, and t the seconds until it is full again.")
					}
				}
			}
		}
	}
}

// correlationHeader is the header every response carries (the middleware
// of handlers.go): the request's own X-Correlation-Id when well-formed,
// else a fresh one; the same id is in the server's logs and in the
// events and webhooks the request causes.
const correlationHeader = "X-Correlation-Id"

// declareCorrelationHeader documents correlationHeader once, in
// components, and on every response of every operation.
func declareCorrelationHeader(doc *huma.OpenAPI) {
	if doc.Components.Headers == nil {
		doc.Components.Headers = map[string]*huma.Header{}
	}
	doc.Components.Headers[correlationHeader] = &huma.Header{
		Description: "The id that ties this response to the server's logs and to the events and webhooks the request " +
			"caused: the request's own X-Correlation-Id when it is well-formed (1–64 letters, digits, '.', '_', ':' or '-'), " +
			"else a fresh UUID. Quote it when you ask for support.",
		Schema: &huma.Schema{Type: "string", MaxLength: ptr(64), Pattern: correlationPattern.String()},
	}
	for _, item := range doc.Paths {
		for _, op := range operations(item) {
			for _, res := range op.Responses {
				if res.Headers == nil {
					res.Headers = map[string]*huma.Param{}
				}
				res.Headers[correlationHeader] = &huma.Param{Ref: "#/components/headers/" + correlationHeader}
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// operations are the operations of a path.
func operations(item *huma.PathItem) []*huma.Operation {
	var out []*huma.Operation
	for _, op := range []*huma.Operation{item.Get, item.Put, item.Post, item.Delete, item.Patch} {
		if op != nil {
			out = append(out, op)
		}
	}
	return out
}

// usedTags lists the tags the document's operations use.
func usedTags(doc *huma.OpenAPI) []string {
	var out []string
	for _, item := range doc.Paths {
		for _, op := range operations(item) {
			for _, t := range op.Tags {
				if !slices.Contains(out, t) {
					out = append(out, t)
				}
			}
		}
	}
	return out
}
