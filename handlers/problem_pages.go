package handlers

import (
	"encoding/json"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// The problem types' catalogue, served where the types point: a problem's
// `type` is a URI reference relative to the API's origin, so
// GET /problems/seat-unavailable on the API answers what that type means,
// with which statuses and from which operations it comes. GET /problems
// lists them all. Both answer HTML, or JSON to a client that asks for
// application/json. The catalogue is built from the same tables the
// OpenAPI document's x-problem-types come from (problem_catalog.go), so it
// cannot name a type the contract does not, nor miss one.

// problemEntry is one problem type of the catalogue.
type problemEntry struct {
	Type    string `json:"type"`
	Example string `json:"exampleDetail"`
	// Statuses are the HTTP statuses the type comes with.
	Statuses []int `json:"statuses"`
	// Operations are the operation ids that declare it; empty with Any.
	Operations []string `json:"operations,omitempty"`
	// Any says every operation that answers one of Statuses may carry it
	// (the edge's and the platform's types).
	Any bool `json:"anyOperation"`
}

// problemCatalogue returns every problem type, sorted; built once from the
// tables, which do not change while the process runs. Callers must not
// modify it.
var problemCatalogue = sync.OnceValue(buildProblemCatalogue)

func buildProblemCatalogue() []problemEntry {
	byType := map[string]*problemEntry{}
	entry := func(typ string) *problemEntry {
		e := byType[typ]
		if e == nil {
			e = &problemEntry{Type: typ, Example: problemDetails[typ]}
			byType[typ] = e
		}
		return e
	}
	for status, types := range commonProblems {
		for _, typ := range types {
			e := entry(typ)
			e.Any = true
			e.Statuses = append(e.Statuses, status)
		}
	}
	for op, byStatus := range operationProblems {
		for status, types := range byStatus {
			for _, typ := range types {
				e := entry(typ)
				if !slices.Contains(e.Statuses, status) {
					e.Statuses = append(e.Statuses, status)
				}
				if !e.Any && !slices.Contains(e.Operations, op) {
					e.Operations = append(e.Operations, op)
				}
			}
		}
	}
	// The ServeMux's 405, answered for every path whatever the
	// operation (statusRecorder); no operation declares it.
	e := entry(TypeMethodNotAllowed)
	e.Any, e.Statuses, e.Example = true, []int{http.StatusMethodNotAllowed}, "This resource does not support the method \"DELETE\"; Allow lists those it does."
	out := make([]problemEntry, 0, len(byType))
	for _, typ := range slices.Sorted(maps.Keys(byType)) {
		e := byType[typ]
		slices.Sort(e.Statuses)
		slices.Sort(e.Operations)
		out = append(out, *e)
	}
	return out
}

var problemPage = template.Must(template.New("problems").Funcs(template.FuncMap{
	"statusText": http.StatusText,
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}} · Boxoffice API</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem}code{background:#f3f3f3;padding:0 .2em}section{border-top:1px solid #ddd;padding:.5rem 0}</style>
</head><body>
<h1>{{.Title}}</h1>
<p>Errors of the Boxoffice API are <a href="https://www.rfc-editor.org/rfc/rfc9457">RFC 9457</a> problems
(<code>application/problem+json</code>) whose <code>type</code> is stable: switch on it, not on <code>title</code> or
<code>detail</code>. The reference of every operation is at <a href="/docs">/docs</a>; all the types are at <a href="/problems">/problems</a>.</p>
{{range .Entries}}<section id="{{.Type}}">
<h2><code>{{.Type}}</code></h2>
<p>Status: {{range $i, $s := .Statuses}}{{if $i}}, {{end}}{{$s}} {{statusText $s}}{{end}}.
{{if .Any}}Any operation that answers that status may carry it.{{else}}Answered by: {{range $i, $o := .Operations}}{{if $i}}, {{end}}<code>{{$o}}</code>{{end}}.{{end}}</p>
<p>For example: “{{.Example}}”</p>
</section>
{{end}}</body></html>
`))

// serveProblems answers GET /problems (the catalogue) and
// GET /problems/{name} (one type); an unknown name is a 404 problem.
func serveProblems(w http.ResponseWriter, r *http.Request) {
	entries := problemCatalogue()
	title := "Problem types"
	if name := r.PathValue("name"); name != "" {
		i := slices.IndexFunc(entries, func(e problemEntry) bool { return e.Type == "/problems/"+name })
		if i < 0 {
			writeProblemTo(w, problem(http.StatusNotFound, TypeNotFound, "No such problem type; see /problems for all of them."))
			return
		}
		entries, title = entries[i:i+1], "Problem type "+entries[i].Type
	}
	h := w.Header()
	h.Set("Cache-Control", "public, max-age=3600")
	h.Set("Vary", "Accept")
	h.Set("X-Content-Type-Options", "nosniff")
	if strings.Contains(r.Header.Get("Accept"), "application/json") {
		h.Set("Content-Type", "application/json")
		body := any(entries)
		if r.PathValue("name") != "" {
			body = entries[0]
		}
		_ = json.NewEncoder(w).Encode(body)
		return
	}
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	_ = problemPage.Execute(w, struct {
		Title   string
		Entries []problemEntry
	}{title, entries})
}
