package handlers

import (
	"crypto/sha256"
	_ "embed" // the reference page
	"encoding/base64"
	"net/http"
	"regexp"
	"strings"
)

// referencePage is the API reference /docs serves: Redoc's rendering of
// openapi.yaml with Redoc's own scripts inlined (.ci/build-reference,
// run by make generate and drift-checked like the document). It loads
// nothing from anywhere, so it works where the network has no internet
// access or a policy blocks third-party scripts.
//
//go:embed reference.html
var referencePage []byte

// referencePolicy is the page's Content-Security-Policy: its inline
// scripts by hash and nothing else — no network access at all but to
// this origin — so that a change that made the page fetch something
// would show in the browser test as a blocked request, not pass unseen.
var referencePolicy = contentPolicy(referencePage)

var inlineScript = regexp.MustCompile(`(?s)<script(?:\s[^>]*)?>(.*?)</script>`)

// contentPolicy allows page's inline scripts by their SHA-256 (CSP 3).
func contentPolicy(page []byte) string {
	var hashes []string
	for _, m := range inlineScript.FindAllSubmatch(page, -1) {
		sum := sha256.Sum256(m[1])
		hashes = append(hashes, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
	}
	return strings.Join([]string{
		"default-src 'none'",
		"script-src " + strings.Join(hashes, " "),
		"style-src 'unsafe-inline'", // Redoc's styled-components
		"img-src 'self' data:",
		"font-src 'self' data:",
		"connect-src 'self'",
		"worker-src blob:",
		"base-uri 'none'",
		"form-action 'none'",
		"frame-ancestors 'none'",
	}, "; ")
}

// serveReference answers GET /docs with referencePage.
func serveReference(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", referencePolicy)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(referencePage)
}
