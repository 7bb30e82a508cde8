// Package roles is the wiring of the boxoffice binary: configuration from
// the environment, the one construction of a purchase cell (BuildCell),
// and each role (serve, relay, work, dev, …) that cmd/boxoffice runs. It
// is the only place that wires concrete types together; cmd/boxoffice-lab
// runs the same roles beside the benchmarks and the simulator.
package roles

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Command is one of a binary's commands: the word that selects it, its
// line in the binary's usage, and how it runs. A binary's usage and its
// dispatch are built from one table of them (Usage, Dispatch), so a
// command cannot run without being listed, nor be listed without running.
type Command struct {
	Name string
	// Args is what the usage shows after the name, if anything.
	Args string
	// Does is the command's line in the usage; a command without one is
	// not listed (a binary's internal command).
	Does string
	// Service marks a long-running role, which takes the Go GC target
	// (SetGCPercent) before it starts.
	Service bool
	// Run runs the command with its flags args until it ends or ctx is
	// done. Nil for a command Main answers itself (help, version).
	Run func(ctx context.Context, args []string) error
}

// Commands are the production binary's commands, in the order its usage
// lists them.
var Commands = []Command{
	{Name: "dev", Does: "run everything on this machine: private or local PostgreSQL, demo data, tokens", Service: true,
		Run: func(ctx context.Context, args []string) error { return runDev(ctx, args, os.Getenv, os.Stdout) }},
	{Name: "serve", Does: "run the HTTP API", Service: true,
		Run: func(ctx context.Context, args []string) error { return runServe(ctx, args, os.Getenv) }},
	{Name: "relay", Does: "publish the outbox to JetStream (the only publisher)", Service: true,
		Run: func(ctx context.Context, args []string) error { return runRelay(ctx, args, os.Getenv) }},
	{Name: "work", Does: "run the durable consumers [-only a,b]", Service: true,
		Run: func(ctx context.Context, args []string) error { return runWork(ctx, args, os.Getenv) }},
	{Name: "migrate", Does: "apply database migrations (safe to run twice or concurrently)", Run: runMigrate},
	{Name: "fence", Does: "raise the region epoch (--epoch N): older processes can no longer write",
		Run: func(ctx context.Context, args []string) error { return runFence(ctx, args, os.Getenv, os.Stdout) }},
	{Name: "failover", Does: "regional failover, step by step: stop | status | promote | resume (-epoch N+1)",
		Run: func(ctx context.Context, args []string) error { return runFailover(ctx, args, os.Getenv, os.Stdout) }},
	{Name: "smoke", Does: "one synthetic purchase and test webhook through the API [-api URL]; exit 0 or the reason",
		Run: func(ctx context.Context, args []string) error { return runSmoke(ctx, args, os.Getenv, os.Stdout) }},
	{Name: "reconcile", Does: "compare the provider's PaymentIntents with orders and repair mismatches [-since 24h] [-dry-run]",
		Run: func(ctx context.Context, args []string) error { return runReconcile(ctx, args, os.Getenv, os.Stdout) }},
	{Name: "audit", Does: "check the invariants against the database (and NATS_URL); exit 1 if one is broken",
		Run: func(ctx context.Context, args []string) error { return runAudit(ctx, args, os.Getenv, os.Stdout) }},
	{Name: "dlq", Does: "dead letters: list [-consumer c] | show SEQ | replay|discard -by WHO -why TEXT SEQ...",
		Run: func(ctx context.Context, args []string) error { return runDLQ(ctx, args, os.Getenv, os.Stdout) }},
	{Name: "timeline", Does: "one order's story, every fact in time order [-json] ORDER_ID",
		Run: func(ctx context.Context, args []string) error { return runTimeline(ctx, args, os.Getenv, os.Stdout) }},
	{Name: "token", Does: "mint a development bearer token",
		Run: func(_ context.Context, args []string) error { return runToken(args) }},
	{Name: "healthcheck", Args: "URL", Does: "exit 0 if URL answers 2xx (container healthchecks)", Run: runHealthcheck},
	{Name: "openapi", Does: "print the OpenAPI document (YAML)",
		Run: func(_ context.Context, args []string) error { return runOpenAPI(args) }},
	{Name: "settings", Does: "print the environment variables, their defaults and meanings (the README's table) [-readme FILE]",
		Run: func(_ context.Context, args []string) error { return runSettings(args, os.Stdout) }},
	{Name: "version", Does: "print the version and commit"},
	{Name: "help", Args: "CMD", Does: "print a command's flags"},
}

// Usage lists the listed commands of cmds under heading, a line each.
func Usage(heading string, cmds []Command) string {
	var b strings.Builder
	b.WriteString(heading + ":\n")
	for _, c := range cmds {
		if c.Does == "" {
			continue
		}
		fmt.Fprintf(&b, "  %-9s %s\n", strings.TrimSpace(c.Name+" "+c.Args), c.Does)
	}
	return b.String()
}

// ErrUnknownCommand is Dispatch's answer to a command it does not know.
var ErrUnknownCommand = errors.New("unknown command")

// Dispatch runs the command of cmds named name, with its flags args, until
// it ends or ctx is done; ErrUnknownCommand when cmds has none that runs.
func Dispatch(ctx context.Context, cmds []Command, name string, args []string) error {
	for _, c := range cmds {
		if c.Name != name || c.Run == nil {
			continue
		}
		if c.Service {
			SetGCPercent(os.Getenv)
		}
		return c.Run(ctx, args)
	}
	return ErrUnknownCommand
}

// Run runs the production binary's command cmd (Commands) with its flags
// args until it ends or ctx is done.
func Run(ctx context.Context, cmd string, args []string) error {
	return Dispatch(ctx, Commands, cmd, args)
}

// Main is a binary's main: it runs os.Args' command through run (Run, for
// the production binary) under a context that SIGINT and SIGTERM cancel.
// `help`, -h and --help print usage, `help CMD` that command's flags (as
// `CMD -h` does), and `version` the version and commit, all exiting 0; a
// missing command prints usage and exits 2; an unknown command or flag
// prints one line and exits 2; a command that fails prints its error and
// exits 1.
func Main(binary, usage string, run func(ctx context.Context, cmd string, args []string) error) {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	switch cmd {
	case "help", "-h", "--help":
		if len(args) == 0 {
			fmt.Print(usage)
			return
		}
		cmd, args = args[0], []string{"-h"}
	case "version", "--version":
		fmt.Println(VersionLine(binary))
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, cmd, args)
	stop()
	code := exitCode(err)
	switch {
	case errors.Is(err, ErrUnknownCommand):
		fmt.Fprintf(os.Stderr, "%s: unknown command %q (%s help lists the commands)\n", binary, cmd, binary)
	case code != 0:
		fmt.Fprintf(os.Stderr, "%s %s: %v\n", binary, cmd, err)
	}
	if code != 0 {
		os.Exit(code)
	}
}

// exitCode is the exit status of a command that returned err: 0 for none,
// for -h or --help (the command's flags printed their usage) and for a
// stop by signal; 2 for an unknown command or a command line that does
// not parse (UsageError); 1 for a failure.
func exitCode(err error) int {
	var usage *UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp), errors.Is(err, context.Canceled):
		return 0
	case errors.Is(err, ErrUnknownCommand), errors.As(err, &usage):
		return 2
	default:
		return 1
	}
}
