package handlers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// chromium is where Debian's chromium package installs the browser.
const chromium = "/usr/bin/chromium"

// /docs is the reference page the binary carries: it names no script,
// style or font of another origin, and its Content-Security-Policy lets
// it fetch nothing but from this origin.
func TestDocsLoadNothingFromElsewhere(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.do(t, http.MethodGet, "/docs", nil, nil)
	require.Equal(t, http.StatusOK, res.status)
	require.True(t, strings.HasPrefix(res.header.Get("Content-Type"), "text/html"))
	page := string(res.body)
	for _, remote := range []*regexp.Regexp{
		regexp.MustCompile(`<script[^>]*\ssrc=`), regexp.MustCompile(`<link[^>]*\shref="?https?:`),
		regexp.MustCompile(`@import\s+url\(["']?https?:`), regexp.MustCompile(`<img[^>]*\ssrc="?https?:`),
	} {
		require.NotRegexp(t, remote, page, "the reference loads something from elsewhere")
	}
	csp := res.header.Get("Content-Security-Policy")
	require.Contains(t, csp, "default-src 'none'")
	require.Contains(t, csp, "connect-src 'self'")
	require.NotContains(t, csp, "http")
}

// The API's root says where to go next, and each place it names answers:
// a newcomer who opens the URL `make run` prints gets no 404.
func TestRootNamesTheDocs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res := b.do(t, http.MethodGet, "/", nil, nil)
	require.Equal(t, http.StatusOK, res.status, "%s", res.body)
	index := res.json(t)
	require.Equal(t, "Boxoffice API", index["name"])
	for _, key := range []string{"docs", "openapi", "health"} {
		path, ok := index[key].(string)
		require.True(t, ok, "the root names %s", key)
		got := b.do(t, http.MethodGet, path, nil, nil)
		require.Equal(t, http.StatusOK, got.status, "%s %s", path, got.body)
	}
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/nothing-here", nil, nil).status, "only the root itself")
}

// /docs opens in headless Chromium with every address but the API's own
// unreachable (a dead proxy for everything, loopback excepted, and no
// name resolution), and every operation of openapi.yaml is on the page,
// with no script refused by the page's policy.
func TestDocsRenderWithNoNetwork(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("%s not found; install it with: apt install chromium", chromium)
	}
	b := setup(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1280,2000",
		"--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
		"--enable-logging=stderr", "--v=0", "--virtual-time-budget=10000",
		"--dump-dom", b.srv.URL+"/docs")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "chromium: %s", stderr.String())
	require.NotContains(t, stderr.String(), "Content Security Policy", "the page's policy refused something")
	text := visibleText(stdout.String())

	raw, err := os.ReadFile("../openapi.yaml")
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]struct {
			Tags []string `yaml:"tags"`
		} `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &doc))
	// Each tag's section lists its first operations and says how many
	// more its "Show more" button opens.
	n, hidden := 0, map[string]int{}
	for path, item := range doc.Paths {
		for method, op := range item {
			n++
			if !strings.Contains(text, method+" "+path) {
				require.NotEmpty(t, op.Tags, "%s %s", method, path)
				hidden[op.Tags[0]]++
			}
		}
	}
	for tag, k := range hidden {
		require.Regexp(t, regexp.MustCompile(regexp.QuoteMeta(tag)+` Copy .*? Show `+strconv.Itoa(k)+` more`), text,
			"%d operations of %s are neither on the page nor behind its Show more", k, tag)
	}
	require.Greater(t, n, 30)
	require.Less(t, len(hidden), 3, "most sections show all their operations")
}

// visibleText is the DOM's text outside scripts and styles, with runs of
// white space as one space.
func visibleText(dom string) string {
	dom = regexp.MustCompile(`(?s)<(script|style)[^>]*>.*?</(script|style)>`).ReplaceAllString(dom, "")
	dom = regexp.MustCompile(`<[^>]+>`).ReplaceAllString(dom, " ")
	return strings.Join(strings.Fields(dom), " ")
}

// Every problem type the contract declares, and the 405 the edge answers,
// is a page at its own URI (the type resolved against the API's origin),
// in HTML for a person and JSON for a program; an unknown type is a 404
// problem.
func TestProblemTypesArePagesAtTheirURIs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	raw, err := os.ReadFile(filepath.Join("..", "openapi.yaml"))
	require.NoError(t, err)
	declared := map[string]bool{"/problems/method-not-allowed": true}
	for _, m := range regexp.MustCompile(`(?m)^\s+- (/problems/[a-z-]+)$`).FindAllStringSubmatch(string(raw), -1) {
		declared[m[1]] = true
	}
	require.Greater(t, len(declared), 20, "openapi.yaml lists the operations' problem types")
	for typ := range declared {
		res := b.do(t, http.MethodGet, typ, nil, nil)
		require.Equal(t, http.StatusOK, res.status, "%s: %s", typ, res.body)
		require.True(t, strings.HasPrefix(res.header.Get("Content-Type"), "text/html"), typ)
		require.Contains(t, string(res.body), "<code>"+typ+"</code>")
		res = b.do(t, http.MethodGet, typ, map[string]string{"Accept": "application/json"}, nil)
		require.Equal(t, http.StatusOK, res.status, "%s: %s", typ, res.body)
		require.Equal(t, typ, res.json(t)["type"])
		require.NotEmpty(t, res.json(t)["statuses"])
	}
	all := b.do(t, http.MethodGet, "/problems", map[string]string{"Accept": "application/json"}, nil)
	require.Equal(t, http.StatusOK, all.status)
	var list []map[string]any
	require.NoError(t, json.Unmarshal(all.body, &list))
	require.Len(t, list, len(declared), "the catalogue names exactly the declared types")
	res := b.do(t, http.MethodGet, "/problems/no-such-type", nil, nil)
	require.Equal(t, http.StatusNotFound, res.status)
	require.Equal(t, "application/problem+json", res.header.Get("Content-Type"))
}
