// Package stripemocktest runs stripe-mock, Stripe's official mock of its
// API (github.com/stripe/stripe-mock), for tests of code that talks to
// Stripe.
//
// stripe-mock validates each request against Stripe's OpenAPI spec and
// answers with fixture data; it is stateless, so it remembers no intent
// between requests. Tests against it check request shapes and response
// decoding, not Stripe's state machine.
package stripemocktest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"boxoffice/testkit"
)

// Version is the stripe-mock release installed when none is found.
const Version = "v0.203.0"

// InstallCommand is how to install stripe-mock by hand.
const InstallCommand = "go install github.com/stripe/stripe-mock@" + Version

// startTimeout bounds how long stripe-mock may take to listen.
const startTimeout = 30 * time.Second

// Start starts a stripe-mock that serves HTTP on a free loopback port, and
// returns its base URL, e.g. http://127.0.0.1:41979. The process is
// stopped when the test ends. Without a stripe-mock binary (see Binary) the
// test fails, saying how to install one.
func Start(tb testing.TB) string {
	tb.Helper()
	bin, err := Binary()
	if err != nil {
		tb.Fatalf("stripemocktest: %v", err)
	}
	// Port 0 for both listeners: the system picks free ports, which
	// stripe-mock prints. Naming only the HTTP address would still open
	// HTTPS on its default port 12112, which parallel instances share.
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatalf("stripemocktest: %v", err)
	}
	var stderr testkit.Buffer // stripe-mock writes while the test reads
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatalf("stripemocktest: start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	addr := make(chan string, 1)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "Listening for HTTP at address: "); ok {
				addr <- a
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-exited:
		tb.Fatalf("stripemocktest: %s exited before listening: %s", bin, output(&stderr))
	case <-time.After(startTimeout):
		tb.Fatalf("stripemocktest: %s did not listen within %s: %s", bin, startTimeout, output(&stderr))
	}
	return ""
}

var (
	installOnce sync.Once
	installPath string
	installErr  error
)

// Binary returns the path of a stripe-mock executable: the one on PATH,
// else the one in $(go env GOBIN) or $(go env GOPATH)/bin. When there is
// none it runs InstallCommand, once per process, and returns what it
// installed; if that fails, the error says how to install it by hand.
func Binary() (string, error) {
	if p, err := exec.LookPath("stripe-mock"); err == nil {
		return p, nil
	}
	installOnce.Do(func() { installPath, installErr = findOrInstall() })
	return installPath, installErr
}

func findOrInstall() (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("stripe-mock is not on PATH and there is no go command to install it; run %q", InstallCommand)
	}
	out, err := exec.Command(goBin, "env", "GOBIN", "GOPATH").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	// One line per variable, an empty one for an unset GOBIN: trim only
	// the final newline, or GOPATH would be read as GOBIN.
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	var dir string
	if len(lines) > 0 && strings.TrimSpace(lines[0]) != "" {
		dir = strings.TrimSpace(lines[0])
	} else if len(lines) > 1 {
		// GOPATH may list several directories; go install uses the first.
		dir = filepath.Join(filepath.SplitList(strings.TrimSpace(lines[1]))[0], "bin")
	}
	path := filepath.Join(dir, "stripe-mock")
	if dir != "" && isExecutable(path) {
		return path, nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, goBin, "install", "github.com/stripe/stripe-mock@"+Version)
	// Outside the module: the tool's own go.mod decides its dependencies.
	install.Dir = os.TempDir()
	if msg, err := install.CombinedOutput(); err != nil {
		return "", fmt.Errorf("stripe-mock not found on PATH or in %s, and %q failed: %w\n%s", dir, InstallCommand, err, msg)
	}
	if !isExecutable(path) {
		return "", fmt.Errorf("%q succeeded but %s is missing; install it by hand and put it on PATH", InstallCommand, path)
	}
	return path, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// output is what stripe-mock wrote to stderr, for an error message.
func output(b *testkit.Buffer) string {
	if out := b.String(); out != "" {
		return out
	}
	return "(no output)"
}
