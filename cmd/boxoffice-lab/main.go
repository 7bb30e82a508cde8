// Command boxoffice-lab measures and rehearses Boxoffice: the benchmarks
// against the pgbench baselines and the onsale simulator. It also runs
// every command of the production binary (package roles), so the
// simulator's --spawn and the stream benchmark can start the roles as
// processes of this one executable. It is not in the production image.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"boxoffice/cmd/boxoffice/roles"
)

const usage = `usage: boxoffice-lab <command> [flags]

lab commands:
  bench     measure the hold path, the purchase, the waiting room and the order streams against their baselines
  simulate  simulate an onsale (--buyers N --seats M [--spawn] [--chaos] [--report DIR]), audit, summarize

` + roles.Usage

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	switch cmd {
	case "help", "-h", "--help":
		fmt.Print(usage)
	case "bench":
		err = runBench(ctx, args)
	case "simulate":
		err = runSimulate(ctx, args, os.Getenv, os.Stdout)
	case "nats-node": // hidden: a NATS cluster node for simulate --spawn
		err = runNATSNode(ctx, args)
	default:
		err = roles.Run(ctx, cmd, args)
	}
	stop()
	switch {
	case errors.Is(err, roles.ErrUnknownCommand):
		fmt.Fprintf(os.Stderr, "boxoffice-lab: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	case err != nil && !errors.Is(err, context.Canceled):
		fmt.Fprintf(os.Stderr, "boxoffice-lab: %s: %v\n", cmd, err)
		os.Exit(1)
	}
}
