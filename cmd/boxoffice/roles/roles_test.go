package roles

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// --help is help: every command returns flag.ErrHelp, which Main answers
// with exit status 0 (its flags already printed), not with the error; a
// flag that does not parse is a UsageError, exit status 2.
func TestHelpIsNotAnError(t *testing.T) {
	for _, cmd := range []string{"audit", "fence", "reconcile", "healthcheck", "serve", "relay", "work", "migrate", "dev", "token", "openapi", "dlq"} {
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
	bin := filepath.Join(t.TempDir(), "boxoffice")
	build := exec.Command("go", "build", "-ldflags", "-X boxoffice/cmd/boxoffice/roles.Commit=0123abc", "-o", bin, "boxoffice/cmd/boxoffice")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
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
