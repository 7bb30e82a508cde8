package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"boxoffice/lab/simulator"
	"boxoffice/testkit/dbtest"
)

// chromium is where Debian's chromium package installs the browser.
const chromium = "/usr/bin/chromium"

func TestMain(m *testing.M) { dbtest.Main(m) }

// `boxoffice-lab simulate --spawn` runs a small onsale against a stack of
// separate processes it starts itself (three NATS nodes from its hidden
// nats-node command, two API processes, a relay, two workers): 300 buyers
// contend for 40 seats, nothing is oversold, the audit passes, and the
// report opens in headless Chromium with every chart drawn.
func TestSimulateCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "boxoffice-lab")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	// A node that cannot listen on its monitoring port exits at once with
	// the reason in its log, rather than run on unready: the stack's start
	// then fails with that reason instead of waiting a minute for nothing.
	t.Run("NATSNodeExitsWhenItsPortIsTaken", func(t *testing.T) {
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer taken.Close()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		node := exec.CommandContext(ctx, bin, "nats-node", "-port", "-1", "-cluster-port", "0",
			"-http-port", strconv.Itoa(taken.Addr().(*net.TCPAddr).Port), "-store", t.TempDir())
		out, err := node.CombinedOutput()
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "the node ran until killed: %s", out)
		require.Equal(t, 1, exit.ExitCode(), "%s", out)
		require.Contains(t, string(out), "address already in use")
	})

	reportDir := filepath.Join(dir, "report")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "simulate", "--spawn", "--fresh-db=false",
		"--buyers", "300", "--seats", "40", "--arrival", "spike", "--duration", "4s", "--hold-ttl", "15s",
		"--report", reportDir, "--progress", "plain")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "DATABASE_URL=" + dbtest.NewURL(t)}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	t.Logf("boxoffice-lab simulate:\n%s", stdout.String())
	require.NoError(t, err, "stderr: %s", stderr.String())
	require.Contains(t, stdout.String(), "All 15 invariants hold.")
	require.Regexp(t, regexp.MustCompile(`(?m)^\s+oversold\s+0$`), stdout.String())
	require.Regexp(t, regexp.MustCompile(`(?m)^\s+audit\s+PASSED$`), stdout.String())
	require.Empty(t, processesOf(t, bin), "the run left processes of its stack running")

	raw, err := os.ReadFile(filepath.Join(reportDir, "result.json"))
	require.NoError(t, err)
	var res simulator.Result
	require.NoError(t, json.Unmarshal(raw, &res))
	require.Zero(t, res.Summary.Oversold)
	require.Positive(t, res.Summary.Sold, "nobody bought a seat")
	require.LessOrEqual(t, res.Summary.Sold, 40)
	require.NotNil(t, res.AuditOK)
	require.True(t, *res.AuditOK)
	require.Positive(t, res.Summary.Ticketed)
	require.NotEmpty(t, res.Series)
	require.Equal(t, int64(300), res.Summary.Ticketed+res.Summary.Declined+res.Summary.Abandoned+
		res.Summary.Failed+res.Summary.SoldOut+res.Summary.GaveUp+res.Summary.Errored, "every buyer has an outcome")
	require.NotNil(t, res.CPU)
	require.Positive(t, cpuSecondsOf(res.CPU, "run", simulator.PartStripe), "the buyers paid through the Stripe stand-in's process")

	html, err := os.ReadFile(filepath.Join(reportDir, "report.html"))
	require.NoError(t, err)
	for _, remote := range []string{`src="http`, `href="http`, `url(http`, "<link", "<script", "@import"} {
		require.False(t, strings.Contains(string(html), remote), "report.html loads something (%s)", remote)
	}
	f, err := os.Open(filepath.Join(reportDir, "summary.png"))
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	require.Greater(t, img.Bounds().Dx(), 600)
	require.Greater(t, distinctColors(img), 8, "summary.png is blank")

	t.Run("OpensInHeadlessChromium", func(t *testing.T) {
		t.Parallel()
		checkReportInChromium(t, filepath.Join(reportDir, "report.html"))
	})
}

// `boxoffice-lab simulate --spawn --presale 0.15 --best-available 0.5`: a
// presale whose buyers have codes, then the general sale, half the buyers
// asking for the best available seats, paying through the development
// sandbox (--payments sandbox; TestSimulateCommand pays through the Stripe
// stand-in): nothing is oversold, the audit passes, and both kinds of hold
// and both phases sold seats.
//
// The presale's 18 buyers (0.15 of 120) hold one seat or two each, so
// they can take at most 36 of the 40 seats: the general sale always has
// seats to hold. With 0.3 (36 buyers, about 43 seats wanted) the presale
// could sell out the event, and did on a fast run.
func TestSimulatePresaleThenGeneralSaleWithBestAvailable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "boxoffice-lab")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	reportDir := filepath.Join(dir, "report")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dbURL := dbtest.NewURL(t)
	cmd := exec.CommandContext(ctx, bin, "simulate", "--spawn", "--fresh-db=false",
		"--buyers", "120", "--seats", "40", "--arrival", "spike", "--duration", "3s", "--hold-ttl", "15s",
		"--presale", "0.15", "--presale-for", "3s", "--best-available", "0.5", "--payments", "sandbox",
		"--report", reportDir, "--progress", "plain")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "DATABASE_URL=" + dbURL}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	t.Logf("boxoffice-lab simulate:\n%s", stdout.String())
	require.NoError(t, err, "stderr: %s", stderr.String())
	require.Contains(t, stdout.String(), "All 15 invariants hold.")
	require.Regexp(t, regexp.MustCompile(`(?m)^\s+oversold\s+0$`), stdout.String())
	require.Regexp(t, regexp.MustCompile(`(?m)^\s+audit\s+PASSED$`), stdout.String())

	raw, err := os.ReadFile(filepath.Join(reportDir, "result.json"))
	require.NoError(t, err)
	var res simulator.Result
	require.NoError(t, json.Unmarshal(raw, &res))
	require.Zero(t, res.Summary.Oversold)
	require.Positive(t, res.Summary.Ticketed)
	require.Positive(t, res.Summary.BestAvailableHolds, "best-available buyers held")
	require.Less(t, res.Summary.BestAvailableHolds, res.Summary.Holds, "buyers choosing from the map held")

	// The phases, read from the run's database: presale buyers joined
	// with their codes and held, and so did general sale buyers.
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.Equal(t, int64(2), dbtest.Count(t, pool, "SELECT count(*) FROM onsale_phases"))
	require.Positive(t, dbtest.Count(t, pool, "SELECT count(*) FROM presale_redemptions"), "presale buyers joined with their codes")
	require.Positive(t, dbtest.Count(t, pool, `SELECT count(*) FROM orders o JOIN presale_redemptions r ON r.user_id = o.user_id`),
		"presale buyers held")
	require.Positive(t, dbtest.Count(t, pool, `SELECT count(*) FROM orders o
		WHERE NOT EXISTS (SELECT 1 FROM presale_redemptions r WHERE r.user_id = o.user_id)`), "general sale buyers held")
}

// checkReportInChromium opens the report in headless Chromium, with the
// network off, and requires every chart to be an <svg> in the rendered
// DOM and the screenshot to show more than a blank page.
func checkReportInChromium(t *testing.T, report string) {
	t.Helper()
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("%s not found; install it with: apt install chromium", chromium)
	}
	dir := t.TempDir()
	run := func(args ...string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
			"--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir=" + filepath.Join(dir, "profile"),
			"--window-size=1280,2000", "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"}
		cmd := exec.CommandContext(ctx, chromium, append(base, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "chromium: %s", stderr.String())
		return stdout.Bytes()
	}
	dom := string(run("--dump-dom", "file://"+report))
	for _, id := range simulator.ChartIDs {
		re := regexp.MustCompile(`(?s)<figure id="` + id + `" class="chart">\s*<svg[^>]*>.*?</svg>`)
		require.Regexp(t, re, dom, "chart %s is not an inline SVG in the rendered DOM", id)
	}
	require.GreaterOrEqual(t, strings.Count(dom, "<path"), len(simulator.ChartIDs)*3, "the charts have no lines")

	shot := filepath.Join(dir, "report.png")
	run("--screenshot="+shot, "file://"+report)
	f, err := os.Open(shot)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	require.Equal(t, 1280, img.Bounds().Dx())
	require.Greater(t, distinctColors(img), 50, "the screenshot is (nearly) blank")
}

// distinctColors counts the colours of img, sampling every fourth pixel.
func distinctColors(img image.Image) int {
	seen := map[uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, _ := img.At(x, y).RGBA()
			seen[(r>>8)<<16|(g>>8)<<8|bl>>8] = true
		}
	}
	return len(seen)
}

// cpuSecondsOf is one part's CPU seconds in a window of a run's CPU report.
func cpuSecondsOf(r *simulator.CPUReport, window, part string) float64 {
	for _, w := range r.Windows {
		for _, p := range w.Parts {
			if w.Name == window && p.Part == part {
				return p.CPUSeconds
			}
		}
	}
	return 0
}

// processesOf lists the pids of live processes running the executable bin
// (read from /proc/*/exe).
func processesOf(t *testing.T, bin string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == bin {
			pids = append(pids, pid)
		}
	}
	return pids
}
