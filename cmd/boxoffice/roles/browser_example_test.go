package roles

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
)

// chromium is where Debian's chromium package installs the browser.
const chromium = "/usr/bin/chromium"

// The browser example (examples/browser) buys a seat in headless Chromium
// against `boxoffice dev`, from another origin listed in
// BOXOFFICE_CORS_ORIGINS: the waiting room, the seat map, a hold with an
// Idempotency-Key, the order's event stream read with fetch and the
// Authorization header, payment in the sandbox, and a ticketed order. The
// page reports its outcome by posting it back to the server that served
// it; the test waits for that report. A CORS header missing from the
// API's allow-list, or a stream a browser cannot read, fails it.
func TestBrowserExampleBuysATicket(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("%s not found; install it with: apt install chromium", chromium)
	}
	dir, err := filepath.Abs("../../../examples/browser")
	require.NoError(t, err)
	reports := make(chan []byte, 1)
	var config atomic.Value // []byte, set before the browser starts
	page := http.NewServeMux()
	page.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		html, err := os.ReadFile(filepath.Join(dir, "index.html"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// What the page's host sets before the module runs.
		inject := []byte("<script>window.boxofficeExample = " + string(config.Load().([]byte)) + ";</script>\n<script type=\"module\"")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(bytes.Replace(html, []byte(`<script type="module"`), inject, 1))
	})
	page.Handle("GET /app.js", http.FileServer(http.Dir(dir)))
	page.HandleFunc("POST /report", func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(r.Body)
		select {
		case reports <- buf.Bytes():
		default:
		}
	})
	origin := httptest.NewServer(page)
	t.Cleanup(origin.Close)

	url := dbtest.NewURL(t)
	env := func(name string) string {
		return map[string]string{"DATABASE_URL": url, "HTTP_ADDR": "127.0.0.1:0", "OPS_ADDR": "127.0.0.1:0",
			"BOXOFFICE_LOG_LEVEL": "warn", "BOXOFFICE_CORS_ORIGINS": origin.URL}[name]
	}
	out := startDev(t, env)
	printed := regexp.MustCompile(`(?s)API\s+(\S+).*Demo event\s+(\S+).*Buyer token\s+(\S+)`)
	require.Eventually(t, func() bool { return printed.MatchString(out.String()) }, 60*time.Second, 50*time.Millisecond, "dev printed: %s", out)
	m := printed.FindStringSubmatch(out.String())
	cfg, err := json.Marshal(map[string]string{"api": m[1], "event": m[2], "token": m[3], "report": origin.URL + "/report"})
	require.NoError(t, err)
	config.Store(cfg)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	profile := t.TempDir()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
		"--user-data-dir="+profile, "--enable-logging=stderr", "--v=0", origin.URL+"/")
	stderr := &testkit.Buffer{} // written by exec's copier while the test reads it
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()

	var report struct {
		OK      bool   `json:"ok"`
		Status  string `json:"status"`
		Tickets int    `json:"tickets"`
		Error   string `json:"error"`
		Log     string `json:"log"`
	}
	select {
	case raw := <-reports:
		require.NoError(t, json.Unmarshal(raw, &report), "%s", raw)
	case <-ctx.Done():
		t.Fatalf("the page reported nothing in time; chromium: %s", lastLines(stderr.String(), 30))
	}
	require.True(t, report.OK, "the page failed: %s\n%s\nchromium: %s", report.Error, report.Log, lastLines(stderr.String(), 30))
	require.Equal(t, "ticketed", report.Status, report.Log)
	require.Equal(t, 1, report.Tickets, report.Log)
	for _, step := range []string{"admitted", "held seat", "payment pi_", "order paid", "order ticketed", "ticket for seat"} {
		require.Contains(t, report.Log, step, "the page's log")
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
