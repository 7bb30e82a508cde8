// Command boxoffice-lab measures and rehearses Boxoffice: the benchmarks
// against the pgbench baselines and the onsale simulator. It also runs
// every command of the production binary (package roles), so the
// simulator's --spawn and the stream benchmark can start the roles as
// processes of this one executable. It is not in the production image.
package main

import (
	"context"
	"os"

	"boxoffice/cmd/boxoffice/roles"
)

const usage = `usage: boxoffice-lab <command> [flags]

lab commands:
  bench     measure the hold path, the purchase, the waiting room and the order streams against their baselines
  capacity  plan an onsale's cells, tasks, connections and stream storage from the costs bench purchases measured
  gameday   regional failover drill: SIGKILL the primary region mid-sale, fail over with the commands, measure RPO/RTO [-runs N]
  simulate  simulate an onsale (--buyers N --seats M [--spawn] [--chaos] [--report DIR]), audit, summarize

` + roles.Usage

func main() {
	roles.Main("boxoffice-lab", usage, func(ctx context.Context, cmd string, args []string) error {
		switch cmd {
		case "bench":
			return runBench(ctx, args)
		case "capacity":
			return runCapacity(args, os.Stdout)
		case "gameday":
			return runGameDay(ctx, args, os.Stdout)
		case "simulate":
			return runSimulate(ctx, args, os.Getenv, os.Stdout)
		case "bench-part": // hidden: one part of bench purchases, as its own process
			return runBenchPart(ctx, args)
		case "nats-node": // hidden: a NATS cluster node for simulate --spawn
			return runNATSNode(ctx, args)
		default:
			return roles.Run(ctx, cmd, args)
		}
	})
}
