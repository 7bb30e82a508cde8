// Command boxoffice is the one production binary of Boxoffice. Each
// subcommand is a role that can be scaled and fail on its own; the roles
// and their wiring are in package roles. The benchmarks and the onsale
// simulator are in cmd/boxoffice-lab, so their plotting and progress-bar
// libraries stay out of this binary.
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

const usage = "usage: boxoffice <command> [flags]\n\n" + roles.Usage

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmd, args := os.Args[1], os.Args[2:]
	switch cmd {
	case "help", "-h", "--help":
		fmt.Print(usage)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := roles.Run(ctx, cmd, args)
	stop()
	switch {
	case errors.Is(err, roles.ErrUnknownCommand):
		fmt.Fprintf(os.Stderr, "boxoffice: unknown command %q\n\n%s", cmd, usage)
		os.Exit(2)
	case err != nil && !errors.Is(err, context.Canceled):
		fmt.Fprintf(os.Stderr, "boxoffice: %s: %v\n", cmd, err)
		os.Exit(1)
	}
}
