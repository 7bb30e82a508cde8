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
	"syscall"
)

// Usage lists the commands Run knows.
const Usage = `commands:
  dev       run everything on this machine: private or local PostgreSQL, demo data, tokens
  serve     run the HTTP API
  relay     publish the outbox to JetStream (the only publisher)
  work      run the durable consumers [-only a,b]
  migrate   apply database migrations (safe to run twice or concurrently)
  fence     raise the region epoch (--epoch N): older processes can no longer write
  failover  regional failover, step by step: stop | status | promote | resume (-epoch N+1)
  smoke     one synthetic purchase and test webhook through the API [-api URL]; exit 0 or the reason
  reconcile compare the provider's PaymentIntents with orders and repair mismatches [-since 24h] [-dry-run]
  audit     check the invariants against the database (and NATS_URL); exit 1 if one is broken
  dlq       dead letters: list [-consumer c] | show SEQ | replay|discard -by WHO -why TEXT SEQ...
  timeline  one order's story, every fact in time order [-json] ORDER_ID
  token     mint a development bearer token
  healthcheck URL  exit 0 if URL answers 2xx (container healthchecks)
  openapi   print the OpenAPI document (YAML)
  settings  print the environment variables, their defaults and meanings (the README's table) [-readme FILE]
  version   print the version and commit
  help CMD  print a command's flags
`

// ErrUnknownCommand is Run's answer to a command it does not know.
var ErrUnknownCommand = errors.New("unknown command")

// Run runs the role or operator command cmd with its flags args until it
// ends or ctx is done.
func Run(ctx context.Context, cmd string, args []string) error {
	switch cmd {
	case "dev", "serve", "relay", "work":
		SetGCPercent(os.Getenv)
	}
	switch cmd {
	case "dev":
		return runDev(ctx, args, os.Getenv, os.Stdout)
	case "serve":
		return runServe(ctx, args, os.Getenv)
	case "relay":
		return runRelay(ctx, args, os.Getenv)
	case "work":
		return runWork(ctx, args, os.Getenv)
	case "migrate":
		return runMigrate(ctx, args)
	case "fence":
		return runFence(ctx, args, os.Getenv, os.Stdout)
	case "failover":
		return runFailover(ctx, args, os.Getenv, os.Stdout)
	case "smoke":
		return runSmoke(ctx, args, os.Getenv, os.Stdout)
	case "reconcile":
		return runReconcile(ctx, args, os.Getenv, os.Stdout)
	case "audit":
		return runAudit(ctx, args, os.Getenv, os.Stdout)
	case "dlq":
		return runDLQ(ctx, args, os.Getenv, os.Stdout)
	case "timeline":
		return runTimeline(ctx, args, os.Getenv, os.Stdout)
	case "healthcheck":
		return runHealthcheck(ctx, args)
	case "token":
		return runToken(args)
	case "openapi":
		return runOpenAPI(args)
	case "settings":
		return runSettings(args, os.Stdout)
	default:
		return ErrUnknownCommand
	}
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
