package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"boxoffice/cmd/boxoffice/roles"
	"boxoffice/lab/capacity"
)

// costFlag is a flag that sets one figure of capacity.Costs, named after
// its JSON field so that a file and a command line read alike.
type costFlag struct {
	name, json, unit, usage string
	field                   func(*capacity.Costs) *float64
}

var costFlags = []costFlag{
	{"postgres-ms-per-order", "postgresMsPerOrder", "ms", "PostgreSQL server CPU per ticketed order, the sandbox excluded",
		func(c *capacity.Costs) *float64 { return &c.PostgresMsPerOrder }},
	{"product-ms-per-order", "productMsPerOrder", "ms", "CPU of the product's Go processes (API, relay, consumers, NATS, runtime) per ticketed order",
		func(c *capacity.Costs) *float64 { return &c.ProductMsPerOrder }},
	{"api-ms-per-order", "apiMsPerOrder", "ms", "the API's part of -product-ms-per-order (0: unknown)",
		func(c *capacity.Costs) *float64 { return &c.APIMsPerOrder }},
	{"worker-ms-per-order", "workerMsPerOrder", "ms", "the relay's, consumers' and NATS's part of -product-ms-per-order (0: unknown)",
		func(c *capacity.Costs) *float64 { return &c.WorkerMsPerOrder }},
	{"abandoned-hold-postgres-ms", "abandonedHoldPostgresMs", "ms", fmt.Sprintf("PostgreSQL CPU of a hold never paid, hold and expiry (0: %g × -postgres-ms-per-order)", capacity.DefaultAbandonedHoldShare),
		func(c *capacity.Costs) *float64 { return &c.AbandonedHoldPostgresMs }},
	{"buyers-ms-per-order", "buyersMsPerOrder", "ms", "the load generator's CPU per ticketed order (shared-machine check only)",
		func(c *capacity.Costs) *float64 { return &c.BuyersMsPerOrder }},
	{"stripe-ms-per-order", "stripeMsPerOrder", "ms", "the Stripe stand-in's CPU per ticketed order (shared-machine check only)",
		func(c *capacity.Costs) *float64 { return &c.StripeMsPerOrder }},
	{"round-trips-per-order", "roundTripsPerOrder", "", "database round trips per ticketed order",
		func(c *capacity.Costs) *float64 { return &c.RoundTripsPerOrder }},
	{"events-per-order", "eventsPerOrder", "", "stream events per ticketed order",
		func(c *capacity.Costs) *float64 { return &c.EventsPerOrder }},
	{"event-bytes-avg", "eventBytesAvg", "B", "average stored event size, bytes",
		func(c *capacity.Costs) *float64 { return &c.EventBytesAvg }},
	{"machine-cores", "machineCores", "", "cores of the machine the costs were measured on",
		func(c *capacity.Costs) *float64 { return &c.MachineCores }},
	{"ticketed-per-sec", "ticketedPerSec", "/s", "whole-purchase throughput measured on that machine",
		func(c *capacity.Costs) *float64 { return &c.TicketedPerSec }},
}

// runCapacity runs `boxoffice-lab capacity`: the plan of an onsale from
// the costs of one ticketed order (package capacity). The onsale's flags
// default to docs/capacity.md's reference onsale. A flag that does not parse or a figure
// that cannot be planned with is a UsageError (exit 2).
func runCapacity(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("capacity", flag.ContinueOnError)
	costsPath := fs.String("costs", "", "costs file written by `boxoffice-lab bench purchases -costs-out FILE`; the cost flags override its figures")
	var fromFlags capacity.Costs
	for _, f := range costFlags {
		fs.Float64Var(f.field(&fromFlags), f.name, 0, f.usage)
	}
	var o capacity.Onsale
	fs.Float64Var(&o.AttemptsPerSec, "attempts", 10_000, "hold attempts per second of the crowd (the waiting room shapes them)")
	fs.Float64Var(&o.AdmittedPerSec, "admitted", 800, "target admission rate R of the onsale, admitted buyers per second over all cells")
	fs.Float64Var(&o.OrdersPerSec, "orders", 0, "target successful orders per second instead of -admitted")
	fs.Float64Var(&o.SeatsPerOrder, "seats-per-order", 2.4, "average seats per order")
	fs.Float64Var(&o.PayRatio, "pay-ratio", 0.625, "fraction of admitted buyers who pay (500 orders ÷ 800 admitted)")
	fs.DurationVar(&o.HoldLifetime, "hold-lifetime", 5*time.Minute, "how long a hold owns its seats (BOXOFFICE_HOLD_TTL)")
	fs.Float64Var(&o.SafetyMargin, "margin", 0.3, "fraction of every CPU kept free")
	fs.Float64Var(&o.WriterCores, "writer-cores", 16, "cores of one cell's PostgreSQL writer")
	fs.Float64Var(&o.APITaskCores, "api-task-cores", 2, "cores of one API task")
	fs.Float64Var(&o.WorkerTaskCores, "worker-task-cores", 2, "cores of one worker task (relay or work)")
	fs.IntVar(&o.MinTasks, "min-tasks", 2, "fewest API tasks and worker tasks a cell runs, for availability")
	fs.IntVar(&o.PoolSize, "pool-size", 16, "database pool of each task (DATABASE_MAX_CONNS)")
	fs.IntVar(&o.MaxConnections, "max-connections", 100, "the writer's max_connections")
	fs.IntVar(&o.OpsConnections, "ops-connections", 10, "connections kept for migrations, audits, monitoring and people")
	fs.DurationVar(&o.Retention, "retention", 168*time.Hour, "stream retention (BOXOFFICE_STREAM_MAX_AGE)")
	fs.IntVar(&o.StreamReplicas, "stream-replicas", 3, "stream replicas (BOXOFFICE_STREAM_REPLICAS)")
	if err := roles.ParseFlags(fs, args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["orders"] && !set["admitted"] {
		o.AdmittedPerSec = 0
	}
	if err := o.Validate(); err != nil {
		return &roles.UsageError{Err: err}
	}

	var costs capacity.Costs
	from := map[string]string{}
	if *costsPath != "" {
		var err error
		if costs, err = capacity.Load(*costsPath); err != nil {
			return err
		}
		for _, f := range costFlags {
			if *f.field(&costs) != 0 {
				from[f.json] = *costsPath
			}
		}
	}
	for _, f := range costFlags {
		if set[f.name] {
			*f.field(&costs) = *f.field(&fromFlags)
			from[f.json] = "-" + f.name
		}
	}
	if err := costs.Validate(); err != nil {
		return &roles.UsageError{Err: fmt.Errorf("%w; give -costs FILE (from `boxoffice-lab bench purchases -costs-out FILE`) or the cost flags", err)}
	}
	r := capacity.Plan(costs, o)
	printPlan(stdout, r, o, from)
	return nil
}

// printPlan writes the plan as tables, with the formula or the source
// beside each figure.
func printPlan(stdout io.Writer, r capacity.Result, o capacity.Onsale, from map[string]string) {
	c := r.Costs
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	row := func(cells ...string) { fmt.Fprintln(w, "  "+strings.Join(cells, "\t")) }
	head := func(title string) { fmt.Fprintln(w, "\n"+title) }
	free := 1 - o.SafetyMargin

	fmt.Fprintln(w, "boxoffice-lab capacity — a purchase cell is one PostgreSQL writer and its API and worker tasks; one event sells in one cell")
	head("Costs per ticketed order")
	for _, f := range costFlags {
		src := from[f.json]
		if how, ok := r.Defaulted[f.json]; ok {
			src = how
		} else if src == "" {
			src = "not given"
		}
		row(f.json, strings.TrimSpace(short(*f.field(&c))+" "+f.unit), src)
	}
	if !c.MeasuredAt.IsZero() || c.Source != "" {
		at := "measured"
		if !c.MeasuredAt.IsZero() {
			at = c.MeasuredAt.UTC().Format("2006-01-02 15:04 UTC")
		}
		row("measured", at, c.Source)
	}

	head("Onsale")
	row("attempts/s", num(o.AttemptsPerSec, 0), "shaped by the waiting room, which needs no cells for them: "+num(r.QueuedPerSec, 0)+"/s more join its queue")
	row("target R, admitted/s", num(r.Target.Admitted, 0), num(r.Target.Orders, 0)+" orders/s at pay ratio "+short(o.PayRatio))
	row("seat lock attempts/s", num(r.Target.SeatLocks, 0), "R × "+short(o.SeatsPerOrder)+" seats per order")
	row("abandoned holds/s", num(r.Target.AbandonedHolds, 0), "R × (1 − pay ratio), each expiring after "+roles.DurationText(o.HoldLifetime))

	head(fmt.Sprintf("One cell: a writer of %s cores, %s%% of every CPU kept free", short(o.WriterCores), num(o.SafetyMargin*100, 0)))
	row("PostgreSQL per admitted buyer", num(r.PostgresMsPerAdmitted, 2)+" ms",
		fmt.Sprintf("%s × %s + %s × %s (paid order, abandoned hold)", short(o.PayRatio), short(c.PostgresMsPerOrder), short(1-o.PayRatio), short(c.AbandonedHoldPostgresMs)))
	row("R one cell sustains", num(r.CellMax.Admitted, 0)+" admitted/s",
		fmt.Sprintf("%s cores × 1000 ms × %s ÷ %s ms", short(o.WriterCores), short(free), num(r.PostgresMsPerAdmitted, 2)))
	row("successful orders/s", num(r.CellMax.Orders, 0), "R × pay ratio")
	row("seat lock attempts/s", num(r.CellMax.SeatLocks, 0), "R × seats per order")

	head("Plan")
	cellsNote := fmt.Sprintf("fits one cell at %s%% of its R", num(100*r.Target.Admitted/r.CellMax.Admitted, 0))
	if r.Cells > 1 {
		cellsNote = fmt.Sprintf("one event sells in one cell: %d cells carry this as %d events' onsales at once; one event at this R needs a writer of %s cores, or R held at %s/s",
			r.Cells, r.Cells, num(math.Ceil(r.WriterCoresOneCell*10)/10, 1), num(r.CellMax.Admitted, 0))
	}
	row("cells", strconv.Itoa(r.Cells), cellsNote)
	row("per cell", num(r.PerCell.Admitted, 0)+" admitted/s",
		num(r.PerCell.Orders, 0)+" orders/s, "+num(r.PerCell.SeatLocks, 0)+" seat lock attempts/s")
	taskRow := func(name string, t capacity.Tasks, ms, cores float64) {
		row(fmt.Sprintf("%s tasks (%s cores)", name, short(cores)), strconv.Itoa(t.Run),
			fmt.Sprintf("%s needed: %s ms × %s orders/s ÷ %s ms/s; at least %d", num(t.Needed, 2), short(ms), num(r.PerCell.Orders, 0), num(cores*1000*free, 0), max(o.MinTasks, 1)))
	}
	taskRow("API", r.API, c.APIMsPerOrder, o.APITaskCores)
	taskRow("worker", r.Worker, c.WorkerMsPerOrder, o.WorkerTaskCores)
	conns := r.Connections
	verdict := "fits"
	if !conns.Fits {
		verdict = fmt.Sprintf("OVER by %d", conns.Open-conns.Max)
	}
	poolNote := fmt.Sprintf("largest pool that fits %d", conns.MaxPoolSize)
	if conns.MaxPoolSize == 0 {
		poolNote = "no pool fits: the operations connections take max_connections"
	}
	row("connections", fmt.Sprintf("%d of %d", conns.Open, conns.Max),
		fmt.Sprintf("%s: (%d + %d tasks) × pool %d + %d ops; %s", verdict, r.API.Run, r.Worker.Run, o.PoolSize, o.OpsConnections, poolNote))
	row("database round trips/s", num(r.RoundTripsPerSec, 0), "orders/s × "+short(c.RoundTripsPerOrder)+" (counted, not timed)")
	row("seats held by unpaid holds", num(r.SeatsHeldByAbandoned, 0),
		fmt.Sprintf("%s abandoned holds/s × %s seats × %s", num(r.PerCell.AbandonedHolds, 0), short(o.SeatsPerOrder), roles.DurationText(o.HoldLifetime)))
	row("JetStream events/s", num(r.Stream.EventsPerSec, 0), fmt.Sprintf("orders/s × %s; %s MB/s", short(c.EventsPerOrder), num(r.Stream.BytesPerSec/1e6, 2)))
	stored := fmt.Sprintf("events/s × %s B × %s (%s s) × %d replicas, the load sustained for the whole window",
		short(c.EventBytesAvg), roles.DurationText(o.Retention), num(r.Stream.RetentionSeconds, 0), r.Stream.Replicas)
	if r.Cells > 1 {
		stored += fmt.Sprintf("; all %d cells %s GB", r.Cells, num(r.Stream.StoredBytes*float64(r.Cells)/1e9, 1))
	}
	row("stream stored per cell", num(r.Stream.StoredBytes/1e9, 1)+" GB", stored)

	head("Shared-machine check: every part on the measured machine's cores")
	if s := r.Shared; s.Cores == 0 {
		row("not made", "the costs do not give machineCores")
	} else {
		cores := short(s.Cores) + " cores"
		if s.Busy != s.Cores {
			cores = fmt.Sprintf("%s busy cores (%s%% of %s)", short(s.Busy), num(c.MachineBusyShare*100, 0), short(s.Cores))
		}
		row("predicted ticketed/s", num(s.Predicted, 1), fmt.Sprintf("%s × 1000 ÷ (%s + %s + %s + %s) ms: PostgreSQL, product, buyers, Stripe stand-in",
			cores, short(c.PostgresMsPerOrder), short(c.ProductMsPerOrder), short(c.BuyersMsPerOrder), short(c.StripeMsPerOrder)))
		if s.Busy != s.Cores {
			row("CPU-bound ticketed/s", num(capacity.PredictShared(c, s.Cores), 1), "the same on every core: what the machine would do saturated")
		}
		if s.Measured == 0 {
			row("measured ticketed/s", "not given")
		} else {
			within := fmt.Sprintf("within %s%%: the costs account for the machine's CPU", num(capacity.SharedTolerance*100, 0))
			if !s.Within {
				within = fmt.Sprintf("NOT within %s%%: the costs miss or double-count part of the machine's CPU; measure again before planning with them", num(capacity.SharedTolerance*100, 0))
			}
			row("measured ticketed/s", short(s.Measured))
			row("predicted ÷ measured", num(s.Ratio, 2), within)
		}
	}
	w.Flush() //nolint:errcheck // stdout; nothing to do about a failed write
}

// num formats v with prec decimals and thousands separators.
func num(v float64, prec int) string {
	s := strconv.FormatFloat(v, 'f', prec, 64)
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	whole, frac, hasFrac := strings.Cut(s, ".")
	for i := len(whole) - 3; i > 0; i -= 3 {
		whole = whole[:i] + "," + whole[i:]
	}
	if hasFrac {
		return sign + whole + "." + frac
	}
	return sign + whole
}

// short formats v with at most three decimals, trailing zeros dropped:
// 11.3, 2.825, 94.
func short(v float64) string {
	s := num(v, 3)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
