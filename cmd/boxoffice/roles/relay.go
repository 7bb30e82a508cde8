package roles

import (
	"context"
	"flag"

	"boxoffice/platform/bus"
	"boxoffice/relay"
)

// runRelay runs `boxoffice relay`: the only publisher of domain events,
// plus /healthz, /readyz and /metrics on OPS_ADDR. Run several for
// availability; their leases keep them from publishing the same row at once.
// It serves one purchase cell (BOXOFFICE_CELL): that cell's database, into
// that cell's bus namespace.
func runRelay(ctx context.Context, args []string, getenv func(string) string) error {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	role, err := openBusRole(ctx, "relay", getenv)
	if err != nil {
		return err
	}
	defer role.Close()
	r, err := relay.New(role.pool, role.nc, relay.Config{Logger: role.logger, Registerer: role.reg, Bus: bus.ForCell(role.cfg.Cell)})
	if err != nil {
		return err
	}
	return role.run(ctx, "", r.Run)
}
