package handlers_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"boxoffice/domain/cells"
	"boxoffice/domain/payments/sandbox"
	"boxoffice/handlers"
)

// compatDoc is the part of openapi.yaml the compatibility tests read.
type compatDoc struct {
	Paths map[string]map[string]struct {
		OperationID string         `yaml:"operationId"`
		Tags        []string       `yaml:"tags"`
		TestMode    bool           `yaml:"x-test-mode-only"`
		RequestBody *compatContent `yaml:"requestBody"`
		Responses   map[string]compatContent
	} `yaml:"paths"`
	Webhooks map[string]map[string]struct {
		RequestBody *compatContent `yaml:"requestBody"`
	} `yaml:"webhooks"`
	Components struct {
		Schemas map[string]map[string]any `yaml:"schemas"`
	} `yaml:"components"`
}

type compatContent struct {
	Content map[string]struct {
		Schema map[string]any `yaml:"schema"`
	} `yaml:"content"`
}

func readCompatDoc(t *testing.T) compatDoc {
	t.Helper()
	raw, err := os.ReadFile("../openapi.yaml")
	require.NoError(t, err)
	var doc compatDoc
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	return doc
}

// walkSchema calls f on s and every schema under it, following $refs to
// components once each.
func walkSchema(doc compatDoc, s any, seen map[string]bool, f func(where string, s map[string]any)) {
	var walk func(where string, v any)
	walk = func(where string, v any) {
		s, ok := v.(map[string]any)
		if !ok {
			return
		}
		if ref, ok := s["$ref"].(string); ok {
			name := strings.TrimPrefix(ref, "#/components/schemas/")
			if !seen[name] {
				seen[name] = true
				walk(name, doc.Components.Schemas[name])
			}
			return
		}
		f(where, s)
		walk(where+".items", s["items"])
		if props, ok := s["properties"].(map[string]any); ok {
			for k, p := range props {
				walk(where+"."+k, p)
			}
		}
		walk(where+".additionalProperties", s["additionalProperties"])
		for k, v := range s {
			if strings.HasPrefix(k, "x-") {
				walk(where+"."+k, v)
			}
		}
	}
	walk("", s)
}

// Every schema of what the server sends (responses, their stream events,
// webhook messages) is open to new fields and has no nullable array;
// request bodies stay closed.
func TestResponseSchemasAreOpen(t *testing.T) {
	t.Parallel()
	doc := readCompatDoc(t)
	sent := map[string]bool{}
	check := func(where string, s map[string]any) {
		require.NotEqual(t, false, s["additionalProperties"], "%s: a schema the server sends is closed to new fields", where)
		if types, ok := s["type"].([]any); ok && slices.Contains(types, any("array")) {
			require.NotContains(t, types, "null", "%s: a list the server sends is declared nullable", where)
		}
	}
	n := 0
	for path, item := range doc.Paths {
		for method, op := range item {
			for code, res := range op.Responses {
				for mt, c := range res.Content {
					walkSchema(doc, c.Schema, sent, func(where string, s map[string]any) {
						n++
						check(method+" "+path+" "+code+" "+mt+" "+where, s)
					})
				}
			}
		}
	}
	for name, item := range doc.Webhooks {
		for _, c := range item["post"].RequestBody.Content {
			walkSchema(doc, c.Schema, sent, func(where string, s map[string]any) { n++; check("webhook "+name+where, s) })
		}
	}
	require.Greater(t, n, 100)
	require.True(t, sent["Problem"] && sent["OrderBody"], "the walk reached the response components")
	require.Equal(t, false, doc.Components.Schemas["CreateHoldInputBody"]["additionalProperties"], "requests stay closed")
}

// The contract tests still refuse a response field the document does not
// declare, though the document leaves responses open: they validate
// against the document closed again.
func TestContractRefusesAnUndeclaredResponseField(t *testing.T) {
	t.Parallel()
	v := openapiContract(t)
	send := func(body string) string {
		tee := &teeWriter{ResponseWriter: httptest.NewRecorder()}
		tee.Header().Set("Content-Type", "application/json")
		tee.Header().Set("X-Correlation-Id", "c1")
		tee.WriteHeader(http.StatusOK)
		_, err := io.WriteString(tee, body)
		require.NoError(t, err)
		return checkResponse(v, httptestRequest(t, http.MethodGet, "/v1/ticket-signing-key"), tee)
	}
	require.Empty(t, send(`{"algorithm":"Ed25519","publicKey":"11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="}`))
	require.NotEmpty(t, send(`{"algorithm":"Ed25519","publicKey":"11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=","extra":1}`))
}

// The sandbox's buyer actions are in the committed contract, tagged and
// marked test mode only; a process serves and lists them only with the
// sandbox.
func TestSandboxOperationsAreTestModeOnly(t *testing.T) {
	t.Parallel()
	doc := readCompatDoc(t)
	var found []string
	for path, item := range doc.Paths {
		for _, op := range item {
			if !strings.HasPrefix(path, "/v1/sandbox/") {
				require.False(t, op.TestMode, "%s is marked test mode only", op.OperationID)
				continue
			}
			require.Equal(t, []string{"Sandbox"}, op.Tags, op.OperationID)
			require.True(t, op.TestMode, "%s is not marked x-test-mode-only", op.OperationID)
			found = append(found, op.OperationID)
		}
	}
	require.ElementsMatch(t, []string{"sandbox-authorize-payment-intent", "sandbox-decline-payment-intent",
		"sandbox-challenge-payment-intent"}, found)

	served := func(cfg handlers.Config) []string {
		cfg.Logger = slog.New(slog.DiscardHandler)
		var out []string
		for path := range handlers.New(cfg).NewAPI(http.NewServeMux()).OpenAPI().Paths {
			if strings.HasPrefix(path, "/v1/sandbox/") {
				out = append(out, path)
			}
		}
		return out
	}
	require.Empty(t, served(handlers.Config{Cells: cells.Single(&cells.Cell{Name: cells.Default})}),
		"a process without the sandbox lists its operations")
	require.Len(t, served(handlers.Config{Cells: cells.Single(&cells.Cell{Name: cells.Default, Sandbox: &sandbox.Sandbox{}})}), 3)
	require.Len(t, served(handlers.Config{Cells: cells.Single(&cells.Cell{Name: cells.Default}), DescribeSandbox: true}), 3)
}
