package roles

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"boxoffice/ops/failover"
)

// runFence runs `boxoffice fence --epoch N`: it raises the database's region
// epoch to N, never lowering it. From then on every write of a process
// whose BOXOFFICE_REGION_EPOCH is lower is refused (the API answers 503
// fenced), so the old primary's processes cannot sell after a failover
// (docs/failover.md). Raising to the epoch already in force is a no-op.
func runFence(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("fence", flag.ContinueOnError)
	epoch := fs.Int64("epoch", 0, "the new region epoch (required; greater than or equal to the current one)")
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	if *epoch < 1 {
		return errors.New("--epoch N is required, N >= 1")
	}
	_, pool, err := operatorPool(ctx, getenv, 1)
	if err != nil {
		return err
	}
	defer pool.Close()
	f, err := failover.Fence(ctx, pool, *epoch)
	if err != nil {
		return err
	}
	if f.Before == f.After {
		fmt.Fprintf(out, "region epoch already %d; nothing changed\n", f.After)
	} else {
		fmt.Fprintf(out, "region epoch raised from %d to %d: processes on an older epoch can no longer write\n", f.Before, f.After)
	}
	return nil
}
