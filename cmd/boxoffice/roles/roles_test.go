package roles

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/testkit"
	"boxoffice/testkit/dbtest"
	"boxoffice/testkit/natstest"
)

// --help is help: every command returns flag.ErrHelp, which Main answers
// with exit status 0 (its flags already printed), not with the error; a
// flag that does not parse is a UsageError, exit status 2.
func TestHelpIsNotAnError(t *testing.T) {
	for _, cmd := range []string{"audit", "fence", "failover", "smoke", "reconcile", "healthcheck", "serve", "relay", "work", "migrate", "dev", "token", "openapi", "dlq"} {
		for _, arg := range []string{"-h", "--help"} {
			err := Run(context.Background(), cmd, []string{arg})
			require.ErrorIs(t, err, flag.ErrHelp, "%s %s", cmd, arg)
			require.Zero(t, exitCode(err), "%s %s", cmd, arg)
		}
	}
	require.Equal(t, 2, exitCode(ErrUnknownCommand))
	require.Equal(t, 2, exitCode(Run(context.Background(), "audit", []string{"-no-such-flag"})))
	require.Equal(t, 2, exitCode(Run(context.Background(), "reconcile", []string{"-since", "soon"})))
	require.Equal(t, 1, exitCode(errors.New("failed")))
	require.Zero(t, exitCode(context.Canceled))
}

// The binary as an operator meets it: help and version exit 0 on standard
// output; an unknown command or flag exits 2 with one line on standard
// error.
func TestCommandLineManners(t *testing.T) {
	bin := buildBoxoffice(t)
	for _, tc := range []struct {
		args        []string
		code        int
		stdout      string // a line it contains
		stderrLines int
	}{
		{[]string{"--help"}, 0, "commands:", 0},
		{[]string{"help"}, 0, "commands:", 0},
		{[]string{"help", "reconcile"}, 0, "-dry-run", 0},
		{[]string{"reconcile", "--help"}, 0, "-dry-run", 0},
		{[]string{"work", "-h"}, 0, "-only", 0},
		{[]string{"version"}, 0, "commit 0123abc", 0},
		{[]string{"no-such-command"}, 2, "", 1},
		{[]string{"audit", "-no-such-flag"}, 2, "", 1},
	} {
		cmd := exec.Command(bin, tc.args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err, "%v", tc.args)
		}
		require.Equal(t, tc.code, code, "%v: exit status (stderr %q)", tc.args, stderr.String())
		require.Contains(t, stdout.String(), tc.stdout, "%v", tc.args)
		require.Equal(t, tc.stderrLines, strings.Count(stderr.String(), "\n"), "%v: %q", tc.args, stderr.String())
	}
}

// buildBoxoffice builds the boxoffice binary (commit 0123abc) for t.
func buildBoxoffice(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "boxoffice")
	build := exec.Command("go", "build", "-ldflags", "-X boxoffice/cmd/boxoffice/roles.Commit=0123abc", "-o", bin, "boxoffice/cmd/boxoffice")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// serve and work, as processes, announce the sandbox they were told to
// run: a warning at start, boxoffice_payments_sandbox 1 on /metrics and
// payments "sandbox" on /readyz (the API's and the ops listener's); an
// API on Stripe reports stripe and 0, and warns of nothing.
func TestServeAndWorkAnnounceThePaymentProvider(t *testing.T) {
	t.Parallel()
	bin := buildBoxoffice(t)
	ns := natstest.New(t)
	secrets := testSecrets(t)
	base := withVars(secrets, map[string]string{
		"PATH": os.Getenv("PATH"), "DATABASE_URL": dbtest.NewURL(t), "NATS_URL": ns.URL,
		"HTTP_ADDR": "127.0.0.1:0", "OPS_ADDR": "127.0.0.1:0", "BOXOFFICE_LOG_LEVEL": "info",
	})
	sandbox := map[string]string{"BOXOFFICE_PAYMENTS": "sandbox"}
	stripe := map[string]string{"BOXOFFICE_PAYMENTS": "stripe", "STRIPE_SECRET_KEY": "sk_test_not_used", "STRIPE_WEBHOOK_SECRET": ""}
	for _, tc := range []struct {
		role, provider string
		vars           map[string]string
		started        string // the message of the line that carries ops_addr
	}{
		{"serve", "sandbox", sandbox, "serving"},
		{"work", "sandbox", sandbox, "running"},
		{"serve", "stripe", stripe, "serving"},
	} {
		t.Run(tc.role+"_"+tc.provider, func(t *testing.T) {
			t.Parallel()
			var env []string
			for k, v := range withVars(base, tc.vars) {
				env = append(env, k+"="+v)
			}
			logs := testkit.NewLog(t)
			cmd := exec.Command(bin, tc.role)
			cmd.Env, cmd.Stderr = env, logs
			require.NoError(t, cmd.Start())
			t.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				_ = cmd.Wait()
			})
			started := logs.WaitForLine(t, 60*time.Second, "the role to start", func(l testkit.Line) bool { return l["msg"] == tc.started })
			require.InDelta(t, 1, started["region_epoch"], 0, "every line says the region epoch the process writes under")
			urls := []string{"http://" + started["ops_addr"].(string)}
			if tc.role == "serve" {
				urls = append(urls, "http://"+started["addr"].(string))
			}
			for _, u := range urls {
				res, err := http.Get(u + "/readyz")
				require.NoError(t, err)
				var body map[string]any
				require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
				res.Body.Close()
				require.Equal(t, http.StatusOK, res.StatusCode, "%s/readyz: %v", u, body)
				require.Equal(t, tc.provider, body["payments"], "%s/readyz", u)
			}
			res, err := http.Get(urls[0] + "/metrics")
			require.NoError(t, err)
			metrics, err := io.ReadAll(res.Body)
			res.Body.Close()
			require.NoError(t, err)
			gauge := map[string]string{"sandbox": "1", "stripe": "0"}[tc.provider]
			require.Contains(t, string(metrics), "\nboxoffice_payments_sandbox "+gauge+"\n")
			require.Regexp(t, `\nboxoffice_build_info\{commit="[^"]+",goversion="go[^"]+",version="[^"]+"\} 1\n`, string(metrics), "every role says which build it runs")
			var warned []string
			for _, l := range logs.Lines(t) {
				if l["level"] == "WARN" && strings.Contains(l["msg"].(string), "buyers authorize their own payments") {
					warned = append(warned, l["msg"].(string))
				}
			}
			if tc.provider == "sandbox" {
				require.Len(t, warned, 1, "one warning at start")
			} else {
				require.Empty(t, warned)
			}
		})
	}
}
