// Command boxoffice-lab measures and rehearses Boxoffice: the benchmarks
// against the pgbench baselines and the onsale simulator. It also runs
// every command of the production binary (package roles), so the
// simulator's --spawn and the stream benchmark can start the roles as
// processes of this one executable. It is not in the production image.
package main

import (
	"context"
	"os"
	"slices"

	"boxoffice/cmd/boxoffice/roles"
)

// labCommands are the lab's own commands; the production binary's follow
// them (roles.Commands).
var labCommands = []roles.Command{
	{Name: "bench", Does: "measure the hold path, the purchase, the waiting room and the order streams against their baselines",
		Run: runBench},
	{Name: "capacity", Does: "plan an onsale's cells, tasks, connections and stream storage from the costs bench purchases measured",
		Run: func(_ context.Context, args []string) error { return runCapacity(args, os.Stdout) }},
	{Name: "gameday", Does: "regional failover drill: SIGKILL the primary region mid-sale, fail over with the commands, measure RPO/RTO [-runs N]",
		Run: func(ctx context.Context, args []string) error { return runGameDay(ctx, args, os.Stdout) }},
	{Name: "simulate", Does: "simulate an onsale (--buyers N --seats M [--spawn] [--chaos] [--report DIR]), audit, summarize",
		Run: func(ctx context.Context, args []string) error { return runSimulate(ctx, args, os.Getenv, os.Stdout) }},
	// Not listed: one part of bench purchases as its own process, and a
	// NATS cluster node for simulate --spawn.
	{Name: "bench-part", Run: runBenchPart},
	{Name: "nats-node", Run: runNATSNode},
}

var usage = "usage: boxoffice-lab <command> [flags]\n\n" +
	roles.Usage("lab commands", labCommands) + "\n" + roles.Usage("commands", roles.Commands)

func main() {
	cmds := append(slices.Clip(labCommands), roles.Commands...)
	roles.Main("boxoffice-lab", usage, func(ctx context.Context, cmd string, args []string) error {
		return roles.Dispatch(ctx, cmds, cmd, args)
	})
}
