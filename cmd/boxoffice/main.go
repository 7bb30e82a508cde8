// Command boxoffice is the one binary of Boxoffice. Each subcommand is a
// role that can be scaled and fail on its own; main is the only place that
// wires concrete types together.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: boxoffice <command> [flags]

commands:
  dev       run everything on this machine: private or local PostgreSQL, demo data, tokens
  serve     run the HTTP API
  relay     publish the outbox to JetStream (the only publisher)
  work      run the durable consumers [-only a,b]
  migrate   apply database migrations (safe to run twice or concurrently)
  fence     raise the region epoch (--epoch N): older processes can no longer write
  reconcile compare the provider's PaymentIntents with orders and repair mismatches [-since 24h] [-dry-run]
  audit     check the invariants against the database (and NATS_URL); exit 1 if one is broken
  token     mint a development bearer token
  healthcheck URL  exit 0 if URL answers 2xx (container healthchecks)
  openapi   print the OpenAPI document (YAML)
  bench     measure the hold path against the pgbench baseline
  onsale    simulate an onsale (--buyers N --seats M [--spawn] [--chaos] [--report DIR]), audit, summarize
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch cmd {
	case "dev":
		err = runDev(ctx, args, os.Getenv, os.Stdout)
	case "serve":
		err = runServe(ctx, args)
	case "relay":
		err = runRelay(ctx, args)
	case "work":
		err = runWork(ctx, args)
	case "migrate":
		err = runMigrate(ctx, args)
	case "fence":
		err = runFence(ctx, args, os.Getenv, os.Stdout)
	case "reconcile":
		err = runReconcile(ctx, args, os.Getenv, os.Stdout)
	case "audit":
		err = runAudit(ctx, args, os.Getenv, os.Stdout)
	case "healthcheck":
		err = runHealthcheck(ctx, args)
	case "token":
		err = runToken(args)
	case "openapi":
		err = runOpenAPI(args)
	case "bench":
		err = runBench(ctx, args)
	case "onsale":
		err = runOnsale(ctx, args, os.Getenv, os.Stdout)
	case "nats-node": // hidden: a NATS cluster node for onsale --spawn
		err = runNATSNode(ctx, args)
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "boxoffice: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2) //nolint:gocritic // exitAfterDefer: the deferred stop only unregisters the signals
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fatalf("%s: %v", cmd, err)
	}
}
