package handlers_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	vderrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"boxoffice/handlers"
)

// The contract every handler test holds the server to: each response to
// an operation of openapi.yaml (the committed document, which make
// check-generated keeps equal to the code) is validated against it by
// libopenapi-validator — the status must be declared for the operation,
// the content type and the body must match its schema (the schemas forbid
// undeclared fields), and declared headers must match theirs. Strict mode
// also reports a response header the operation does not declare.
//
// Requests are not validated: the hostile-input tests send invalid ones
// on purpose, and what they must get back is still a documented problem.
// Responses to paths the document does not describe (/docs, /metrics, a
// 404 for an unknown path, a 405 for an unknown method) are not an
// operation's and are not checked here.

var (
	contractOnce sync.Once
	contract     validator.Validator
	contractErr  error
	// problemTypes are the problem types each operation's error responses
	// declare (x-problem-types), read from the same document.
	problemTypes []problemRoute
)

// problemRoute is one operation of openapi.yaml: its method, its path as a
// pattern, and the problem types of each error status.
type problemRoute struct {
	method  string
	path    *regexp.Regexp
	literal int // literal path segments: the more, the better the match
	types   map[string][]string
}

// readProblemTypes indexes the x-problem-types of every operation of raw.
func readProblemTypes(raw []byte) ([]problemRoute, error) {
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Types []string `yaml:"x-problem-types"`
			} `yaml:"responses"`
		} `yaml:"paths"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	var out []problemRoute
	for path, item := range doc.Paths {
		segments := strings.Split(path, "/")
		for i, seg := range segments {
			if strings.HasPrefix(seg, "{") {
				segments[i] = "[^/]+"
			} else {
				segments[i] = regexp.QuoteMeta(seg)
			}
		}
		pattern := regexp.MustCompile("^" + strings.Join(segments, "/") + "$")
		for method, op := range item {
			r := problemRoute{
				method:  strings.ToUpper(method),
				path:    pattern,
				literal: strings.Count(path, "/") - strings.Count(path, "{"),
				types:   map[string][]string{},
			}
			for code, res := range op.Responses {
				r.types[code] = res.Types
			}
			out = append(out, r)
		}
	}
	return out, nil
}

// undeclaredProblem says what is wrong when a problem response carries a
// type its operation's response does not declare; "" when it is declared,
// or when the request is not an operation's.
func undeclaredProblem(req *http.Request, status int, body []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(body, &p) != nil {
		return ""
	}
	// The path template in the URL's shape (unescaped, as QuoteMeta
	// matched it), the most literal match first.
	var best *problemRoute
	for i, r := range problemTypes {
		if r.method == req.Method && r.path.MatchString(req.URL.Path) && (best == nil || r.literal > best.literal) {
			best = &problemTypes[i]
		}
	}
	if best == nil {
		return ""
	}
	types, ok := best.types[fmt.Sprint(status)]
	if !ok || slices.Contains(types, p.Type) {
		return "" // an undeclared status is the validator's to report
	}
	return fmt.Sprintf("problem type %s is not among the %d types openapi.yaml declares: %v", p.Type, status, types)
}

// openapiContract is the validator of ../openapi.yaml, built once per test
// binary (parsing the document takes a while; validating is cheap).
func openapiContract(t testing.TB) validator.Validator {
	t.Helper()
	contractOnce.Do(func() {
		raw, err := os.ReadFile("../openapi.yaml")
		if err != nil {
			contractErr = err
			return
		}
		closed, err := closeObjects(raw)
		if err != nil {
			contractErr = err
			return
		}
		doc, err := libopenapi.NewDocument(closed)
		if err != nil {
			contractErr = err
			return
		}
		if problemTypes, err = readProblemTypes(raw); err != nil {
			contractErr = err
			return
		}
		v, errs := validator.NewValidator(doc,
			config.WithStrictMode(),
			// The headers any server or proxy may add, which no operation declares.
			config.WithStrictIgnoredHeadersExtra("Vary", "Cache-Control", "Link", "Traceparent", "X-Request-Id",
				"X-Content-Type-Options", "Referrer-Policy", "Strict-Transport-Security",
				// CORS (cors.go): the edge's, for any operation, to listed origins only.
				"Access-Control-Allow-Origin", "Access-Control-Expose-Headers"),
		)
		if len(errs) > 0 {
			contractErr = fmt.Errorf("openapi.yaml: %v", errs)
			return
		}
		contract = v
	})
	require.NoError(t, contractErr, "building the contract validator")
	return contract
}

// closeObjects returns the document with every object schema that lists
// its properties and says nothing of others closed (additionalProperties:
// false). The document leaves response schemas open so that clients
// accept fields added later (openResponses); the server, checked here,
// must still send only the fields it declares.
func closeObjects(raw []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("close objects: %w", err)
	}
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			hasProps, hasAdditional := false, false
			for i := 0; i+1 < len(n.Content); i += 2 {
				switch n.Content[i].Value {
				case "properties":
					hasProps = n.Content[i+1].Kind == yaml.MappingNode
				case "additionalProperties":
					hasAdditional = true
				}
			}
			if hasProps && !hasAdditional {
				n.Content = append(n.Content,
					&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "additionalProperties"},
					&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "false"})
			}
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(&doc)
	return yaml.Marshal(&doc)
}

// contractViolations collects what responses broke the contract during a
// test; the test fails at its end, listing each.
type contractViolations struct {
	mu   sync.Mutex
	errs []string
}

func (c *contractViolations) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, s)
}

// validating wraps h so that every response it writes to an operation of
// openapi.yaml is checked against the document. Violations fail t when the
// test ends (after its servers closed), so a handler still streaming when a
// test returns is checked too.
func validating(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	v := openapiContract(t)
	var seen contractViolations
	t.Cleanup(func() {
		seen.mu.Lock()
		defer seen.mu.Unlock()
		for _, e := range seen.errs {
			t.Errorf("response breaks openapi.yaml: %s", e)
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := r.Clone(r.Context())
		tee := &teeWriter{ResponseWriter: w}
		h.ServeHTTP(tee, r)
		if tee.status == 0 {
			tee.status = http.StatusOK
		}
		if errs := checkResponse(v, req, tee); errs != "" {
			seen.add(errs)
		}
	})
}

// checkResponse validates one response; it returns what is wrong, or "".
func checkResponse(v validator.Validator, req *http.Request, tee *teeWriter) string {
	header := tee.Header().Clone()
	body := tee.body.Bytes()
	if header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return fmt.Sprintf("%s %s → %d: gzip body: %v", req.Method, req.URL.RequestURI(), tee.status, err)
		}
		if body, err = io.ReadAll(zr); err != nil {
			return fmt.Sprintf("%s %s → %d: gzip body: %v", req.Method, req.URL.RequestURI(), tee.status, err)
		}
	}
	if strings.HasPrefix(header.Get("Content-Type"), "text/event-stream") {
		body = nil // a stream has no schema to check; its status and type still do
	}
	req.Body = http.NoBody
	res := &http.Response{
		StatusCode: tee.status, Header: header, Request: req,
		Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
	}
	ok, errs := v.ValidateHttpResponse(req, res)
	var out []string
	if strings.HasPrefix(header.Get("Content-Type"), "application/problem+json") {
		if msg := undeclaredProblem(req, tee.status, body); msg != "" {
			out = append(out, msg)
		}
	}
	if ok && len(out) == 0 {
		return ""
	}
	for _, e := range errs {
		if e.ValidationType == helpers.PathValidation || e.ValidationSubType == "missingOperation" {
			return "" // not an operation of the document
		}
		if e.ValidationType == vderrors.StrictValidationType && e.ValidationSubType == vderrors.StrictSubTypeProperty {
			// Undeclared fields fail the schema check itself (every body
			// schema is closed by closeObjects); strict mode's own
			// property walk misreads a $ref with a description beside it
			// and a map's typed additionalProperties. Its header check is
			// what strict mode is here for.
			continue
		}
		msg := e.Message
		if e.Reason != "" {
			msg += ": " + e.Reason
		}
		for _, se := range e.SchemaValidationErrors {
			msg += fmt.Sprintf(" [%s: %s]", se.FieldPath, se.Reason)
		}
		out = append(out, msg)
	}
	if len(out) == 0 {
		return ""
	}
	snippet := body
	if len(snippet) > 400 {
		snippet = snippet[:400]
	}
	return fmt.Sprintf("%s %s → %d: %s\n\tbody: %s", req.Method, req.URL.RequestURI(), tee.status,
		strings.Join(out, "; "), snippet)
}

// teeWriter passes a response through and keeps a copy (of at most
// teeLimit bytes) for the contract check. It flushes and unwraps like the
// writer it wraps, so streaming responses stream.
type teeWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

// teeLimit bounds the copy: no response the tests read is larger, and a
// stream may run for the whole test.
const teeLimit = 8 << 20

func (w *teeWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *teeWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if room := teeLimit - w.body.Len(); room > 0 {
		w.body.Write(p[:min(len(p), room)])
	}
	return w.ResponseWriter.Write(p)
}

func (w *teeWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Every JSON request body of the document has an example (but Stripe's
// event, which Stripe documents), and each example is a valid request
// body of its operation.
func TestRequestExamplesAreValid(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../openapi.yaml")
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `yaml:"operationId"`
			RequestBody *struct {
				Content map[string]struct {
					Example any `yaml:"example"`
				} `yaml:"content"`
			} `yaml:"requestBody"`
		} `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	v := openapiContract(t)
	param := regexp.MustCompile(`\{[^}]+\}`)
	n := 0
	for path, item := range doc.Paths {
		for method, op := range item {
			if op.RequestBody == nil || op.OperationID == "receive-stripe-webhook" {
				continue
			}
			mt, ok := op.RequestBody.Content["application/json"]
			if !ok {
				continue
			}
			require.NotNil(t, mt.Example, "%s has no request example", op.OperationID)
			body, err := json.Marshal(mt.Example)
			require.NoError(t, err)
			url := param.ReplaceAllString(path, "01936a4e-7c1e-7d5a-9a63-2f4d8c0b1e27")
			req, err := http.NewRequest(strings.ToUpper(method), "http://localhost:8080"+url, bytes.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			ok, errs := v.GetRequestBodyValidator().ValidateRequestBody(req)
			require.True(t, ok, "%s: the example is not a valid request body: %v", op.OperationID, errs)
			n++
		}
	}
	require.GreaterOrEqual(t, n, 10)
}

// The contract check refuses a problem type its operation's response does
// not declare, and accepts the declared ones: each operation lists its
// problem types, with an example of each.
func TestProblemTypesAreDeclaredPerOperation(t *testing.T) {
	t.Parallel()
	openapiContract(t)
	hold := httptestRequest(t, http.MethodPost, "/v1/events/01936a4e-7c1e-7d5a-9a63-2f4d8c0b1e27/holds")
	for _, typ := range []string{handlers.TypeSeatUnavailable, handlers.TypeSeatLimit, handlers.TypeIdempotencyConflict} {
		require.Empty(t, undeclaredProblem(hold, http.StatusConflict, []byte(`{"type":"`+typ+`"}`)), typ)
	}
	require.NotEmpty(t, undeclaredProblem(hold, http.StatusConflict, []byte(`{"type":"`+handlers.TypeOrderNotCancelable+`"}`)))
	require.NotEmpty(t, undeclaredProblem(hold, http.StatusForbidden, []byte(`{"type":"`+handlers.TypeSeatLimit+`"}`)))
	require.Empty(t, undeclaredProblem(hold, http.StatusForbidden, []byte(`{"type":"`+handlers.TypeAdmissionInvalid+`"}`)))
	cancel := httptestRequest(t, http.MethodPost, "/v1/orders/01936a4e-7c1e-7d5a-9a63-2f4d8c0b1e27/cancel")
	require.Empty(t, undeclaredProblem(cancel, http.StatusConflict, []byte(`{"type":"`+handlers.TypeOrderNotCancelable+`"}`)))
	require.NotEmpty(t, undeclaredProblem(cancel, http.StatusConflict, []byte(`{"type":"`+handlers.TypeSeatUnavailable+`"}`)))

	// Every problem response lists types, each with an example of its own
	// type, and the Problem's type is a URI reference.
	raw, err := os.ReadFile("../openapi.yaml")
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `yaml:"operationId"`
			Responses   map[string]struct {
				Types   []string `yaml:"x-problem-types"`
				Content map[string]struct {
					Examples map[string]struct {
						Value struct {
							Type string `yaml:"type"`
						} `yaml:"value"`
					} `yaml:"examples"`
				} `yaml:"content"`
			} `yaml:"responses"`
		} `yaml:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Format string `yaml:"format"`
				} `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	require.Equal(t, "uri-reference", doc.Components.Schemas["Problem"].Properties["type"].Format)
	for _, item := range doc.Paths {
		for _, op := range item {
			for code, res := range op.Responses {
				mt, ok := res.Content["application/problem+json"]
				if !ok || code == "default" { // huma's, on operations that declare no error
					continue
				}
				require.NotEmpty(t, res.Types, "%s %s lists no problem types", op.OperationID, code)
				var examples []string
				for _, ex := range mt.Examples {
					examples = append(examples, ex.Value.Type)
				}
				require.ElementsMatch(t, res.Types, examples, "%s %s: one example per type", op.OperationID, code)
			}
		}
	}
}

func httptestRequest(t *testing.T, method, path string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, "http://localhost:8080"+path, http.NoBody)
	require.NoError(t, err)
	return req
}
