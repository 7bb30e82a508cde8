package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"boxoffice/cmd/boxoffice/roles"
	"boxoffice/lab/bench"
	"boxoffice/lab/capacity"
	"boxoffice/migrations"
	"boxoffice/platform/db"
	"boxoffice/platform/pgcluster"
)

// The goals of the three figures `bench purchases` prints (issue 25).
const (
	goalDatabaseEfficiency = 1.0 // pgbench's PostgreSQL ms per order ÷ the product's
	goalProductMs          = 2.5 // product CPU ms per ticketed order
	goalSharedRatio        = 0.8 // ticketed/s ÷ pgbench orders/s, everything on one machine
	goalRoundTrips         = 25  // the product's PostgreSQL round trips per order
)

// pgbenchPurchaseRoundTrips are the round trips of one order of
// pgbench-purchase.sql: its 47 statements, 8 BEGINs and 8 COMMITs, less
// the relay's delete counted once (it is outside a transaction).
const pgbenchPurchaseRoundTrips = 55

// partCPU is the CPU each part used in one measured window.
type partCPU struct {
	Postgres, Product, Stripe, Buyers, PGBench time.Duration
	// Machine is every core's busy time (/proc/stat), 0 where it
	// cannot be read.
	Machine time.Duration
}

type cpuGroups struct {
	groups                                     *bench.CPUGroups
	postgres, product, stripe, buyers, pgbench *bench.CPUGroup
	// postgresAll reads every postgres process on the machine when the
	// server's postmaster is not ours to put in a group.
	postgresAll bool
}

func (g *cpuGroups) read() partCPU {
	c := partCPU{Postgres: g.postgres.Usage(), Product: g.product.Usage(), Stripe: g.stripe.Usage(), Buyers: g.buyers.Usage(), PGBench: g.pgbench.Usage()}
	if g.postgresAll {
		c.Postgres, _ = bench.PostgresCPU()
	}
	c.Machine, _ = bench.MachineCPU()
	return c
}

func (c partCPU) sub(o partCPU) partCPU {
	return partCPU{c.Postgres - o.Postgres, c.Product - o.Product, c.Stripe - o.Stripe, c.Buyers - o.Buyers, c.PGBench - o.PGBench, c.Machine - o.Machine}
}

// productRun is one measured window of whole purchases.
type productRun struct {
	Result bench.PurchaseResult
	CPU    partCPU
	Costs  []db.RoleCost
	Stream streamSize // messages and bytes added to the stream
	Shares []bench.CPUShare
	Total  float64 // the profile's seconds
	// PeakRSS is the product process's peak resident memory (VmHWM), 0
	// where it cannot be read.
	PeakRSS int64
	// Statements are the window database's statements, from the start
	// signal on (pg_stat_statements); nil where the module is not loaded.
	Statements []bench.Statement
	// Steady is the CPU each part used in the window's steady state,
	// Result.Steady's interval.
	Steady partCPU
	// RateCuts counts the release controller's cuts of R in the window,
	// by reason: buyers then waited in the waiting room for admission.
	RateCuts map[string]float64
}

// steadyWindow is the part of a product window past its warm-up: from
// warmup after the start to duration after it, the buyers' steady state
// (bench.PurchaseResult.Steady).
type steadyWindow struct{ warmup, duration time.Duration }

// read reads the parts' CPU at the steady state's start and end, counted
// from now, and sends what was used in between.
func (w steadyWindow) read(g *cpuGroups) <-chan partCPU {
	out := make(chan partCPU, 1)
	start := time.Now()
	go func() {
		time.Sleep(w.warmup)
		from := g.read()
		time.Sleep(time.Until(start.Add(w.duration)))
		out <- g.read().sub(from)
	}()
	return out
}

// steadyBusyShare is the machine's busy share in the window's steady
// state, or over the whole window where none was measured.
func (r productRun) steadyBusyShare() float64 {
	if s := r.Result.Steady; s.To > s.From && r.Steady.Machine > 0 {
		return r.Steady.Machine.Seconds() / ((s.To - s.From).Seconds() * float64(runtime.NumCPU()))
	}
	return r.CPU.Machine.Seconds() / (r.Result.Elapsed.Seconds() * float64(runtime.NumCPU()))
}

func (r productRun) perOrder(d time.Duration) float64 {
	if r.Result.Ticketed == 0 {
		return 0
	}
	return float64(d) / float64(time.Millisecond) / float64(r.Result.Ticketed)
}

// pgbenchRun is one measured window of the plain-SQL purchase.
type pgbenchRun struct {
	TPS      float64
	Duration time.Duration
	CPU      partCPU
}

func (r pgbenchRun) pgMsPerOrder() float64 {
	orders := r.TPS * r.Duration.Seconds()
	if orders == 0 {
		return 0
	}
	return float64(r.CPU.Postgres) / float64(time.Millisecond) / orders
}

// runBenchPurchases measures whole purchases — admission, hold,
// PaymentIntent, the card confirmed at a Stripe stand-in, its signed
// webhooks through the real ingress, confirmation, capture, tickets — with
// each part in a process (and a CPU group) of its own, beside
// shared/bench's plain-SQL purchase run by pgbench on the same PostgreSQL,
// alternately, round after round; then both at one fixed rate below
// saturation.
func runBenchPurchases(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench purchases", flag.ContinueOnError)
	duration := fs.Duration("duration", 10*time.Second, "length of each measured window")
	warmup := fs.Duration("warmup", 0, "how long after a product window's start its steady state begins (the throughput and the machine's busy share are read from then to the window's end); default: a fifth of -duration")
	concurrency := fs.Int("concurrency", 64, "buyers purchasing at once in the throughput windows")
	rounds := fs.Int("rounds", 3, "rounds of product, pgbench -M prepared and pgbench (simple), alternately; medians are quoted")
	scriptDir := fs.String("pgbench-dir", "../shared/bench", "directory of pgbench-purchase*.sql and its schema")
	pgClients := fs.Int("pgbench-clients", 16, "clients of the pgbench purchase baseline")
	fixedRate := fs.Float64("fixed-rate", 0, "purchases/s of the fixed-rate comparison; 0: half the slower of the two medians")
	serverURL := fs.String("database-url", "", "an existing PostgreSQL server to use (its maintenance database's URL); default: a private cluster of this machine's PostgreSQL binaries, whose processes are measured exactly")
	pgDir := fs.String("pg-dir", filepath.Join(os.TempDir(), "boxoffice-bench-postgres"), "directory of the private cluster, kept between runs (two runs at once need two)")
	costsOut := fs.String("costs-out", "", "write the measured per-order costs (the capacity model's input) to this JSON file")
	cpuProfile := fs.String("cpuprofile", "", "also write the product's CPU profile of the last throughput window to this file")
	tracing := fs.Bool("tracing", false, "compare the product with tracing off and on (spans exported over OTLP/HTTP to a receiver in this process): a product window of each in each round, alternately, and no pgbench")
	gogcs := fs.String("product-gogc", "", "compare the product's CPU per order at these GOGC values (comma-separated, e.g. 100,200,400): a product window per value in each round, alternately, and no pgbench; default: one window per round at the product's own default (roles.DefaultGCPercent)")
	if err := fs.Parse(args); err != nil {
		return err
	}

	if *warmup == 0 {
		*warmup = *duration / 5
	}
	if *warmup >= *duration {
		return fmt.Errorf("-warmup %s must be shorter than -duration %s", *warmup, *duration)
	}

	g := &cpuGroups{groups: bench.NewCPUGroups()}
	defer g.groups.Close()
	for _, p := range []struct {
		name string
		to   **bench.CPUGroup
	}{{"postgres", &g.postgres}, {"product", &g.product}, {"stripe", &g.stripe}, {"buyers", &g.buyers}, {"pgbench", &g.pgbench}} {
		grp, err := g.groups.Group(p.name)
		if err != nil {
			return err
		}
		*p.to = grp
	}

	adminURL := *serverURL
	if adminURL == "" {
		// Kept between runs (the baseline's 2,000,000 seats load once);
		// under the temporary directory by default, which the postgres
		// user can enter when this runs as root.
		cluster, err := pgcluster.Start(ctx, pgcluster.Config{Dir: *pgDir, Settings: bench.StatementSettings()})
		if err != nil {
			return err
		}
		defer cluster.Stop(context.WithoutCancel(ctx)) //nolint:errcheck // best effort at exit
		adminURL = cluster.URL()
		pid, err := postmasterPID(filepath.Join(cluster.Dir(), "data"))
		if err != nil {
			return err
		}
		if err := g.postgres.AddTree(pid); err != nil {
			return err
		}
	} else {
		g.postgresAll = true
	}

	// Every product window gets a database of its own, migrated and
	// empty, as the first window's is: a window's cost must not depend on
	// what earlier windows left (a second 100,000-seat event made the hold
	// path's PostgreSQL cost three times the first's; docs/performance.md).
	freshDatabase := func() (string, string, func(), error) {
		name := "boxoffice_bench_" + randomHex(4)
		url, err := roles.EnsureDatabase(ctx, adminURL, name)
		if err != nil {
			return "", "", nil, err
		}
		drop := func() { dropDatabase(context.WithoutCancel(ctx), adminURL, name) }
		if err := migrations.Up(ctx, url); err != nil {
			drop()
			return "", "", nil, err
		}
		return name, url, drop, nil
	}
	// Where PostgreSQL's work goes, statement by statement: read when the
	// server loads pg_stat_statements (the private cluster does).
	stmts := bench.Statements{AdminURL: adminURL}
	stmtsOn, err := stmts.Available(ctx)
	if err != nil {
		return err
	}
	pg := bench.PGBench{ScriptDir: *scriptDir, AdminURL: adminURL, Script: "purchase"}
	if err := pg.Prepare(ctx); err != nil {
		return fmt.Errorf("prepare pgbench purchase baseline: %w", err)
	}

	secrets := newBenchSecrets()
	apiAddr, err := freeAddr()
	if err != nil {
		return err
	}
	apiURL := "http://" + apiAddr
	var stripeReady struct{ URL string }
	stripe, err := startPart(ctx, g.stripe, secrets.env(), &stripeReady, "stripe", "-webhook-url", apiURL+"/v1/webhooks/stripe")
	if err != nil {
		return err
	}
	defer stripe.stop()
	// The product starts afresh for every window, so that each measures
	// the same thing from the same state: the release controller's R, the
	// caches and the pools of one window do not carry into the next.
	var productReady struct{ API, Control string }
	startProduct := func(url string, extraEnv ...string) (*part, controlClient, error) {
		product, err := startPart(ctx, g.product, secrets.env(append([]string{
			"DATABASE_URL=" + url, "BOXOFFICE_PAYMENTS=stripe", "STRIPE_API_BASE=" + stripeReady.URL,
			// Every buyer is 127.0.0.1: per-address limits would measure that.
			"BOXOFFICE_WAITINGROOM_IP_LIMIT=-1", "BOXOFFICE_EVENT_READ_IP_LIMIT=-1",
		}, extraEnv...)...), &productReady, "product", "-api-addr", apiAddr)
		if err != nil {
			return nil, controlClient{}, err
		}
		return product, controlClient{base: productReady.Control}, nil
	}
	// settle leaves the server as quiet before each window as before the
	// first: the last window's dead rows vacuumed and its WAL
	// checkpointed, so that neither side's window pays autovacuum and
	// checkpoints for the other's writes.
	pgURL, err := pg.URL()
	if err != nil {
		return err
	}
	settle := func() error { return settleServer(ctx, adminURL, pgURL) }
	// windowOf runs one window of buyers (the flags after -api, -stripe
	// and -duration) against a product started for it with extraEnv.
	windowOf := func(buyerFlags []string, profile bool, extraEnv ...string) (productRun, error) {
		name, url, drop, err := freshDatabase()
		if err != nil {
			return productRun{}, err
		}
		defer drop()
		if err := settle(); err != nil {
			return productRun{}, err
		}
		product, ctl, err := startProduct(url, extraEnv...)
		if err != nil {
			return productRun{}, err
		}
		defer product.stop()
		args := append([]string{"buyers", "-api", productReady.API, "-stripe", stripeReady.URL,
			"-duration", duration.String(), "-warmup", warmup.String()}, buyerFlags...)
		atStart := func() error { return nil }
		if stmtsOn {
			atStart = func() error { return stmts.Reset(ctx, name) }
		}
		r, err := measureProduct(ctx, g, ctl, secrets, args, steadyWindow{*warmup, *duration}, profile && *cpuProfile != "", *cpuProfile, atStart)
		r.PeakRSS = peakRSS(product.cmd.Process.Pid)
		if err == nil && stmtsOn {
			r.Statements, err = stmts.Read(ctx, name)
		}
		return r, err
	}
	if *gogcs != "" {
		return compareGOGC(strings.Split(*gogcs, ","), *rounds, *duration, *concurrency, g, windowOf)
	}
	if *tracing {
		return compareTracing(ctx, *rounds, *duration, *concurrency, g, windowOf)
	}

	fmt.Printf("boxoffice-lab bench purchases — each part its own process; %d rounds of %s windows, steady from %s; CPU by %s\n\n",
		*rounds, *duration, *warmup, g.groups.Method())
	fmt.Printf("%-40s %10s %9s %9s %9s %9s %9s\n", "window", "orders/s", "pg ms", "product", "stripe", "buyers", "pgbench")
	var (
		products        []productRun
		prepared, plain []pgbenchRun
		// pgStatements are the last pgbench -M prepared window's.
		pgStatements []bench.Statement
	)
	for round := 1; round <= *rounds; round++ {
		r, err := windowOf([]string{"-concurrency", strconv.Itoa(*concurrency)}, round == *rounds && *cpuProfile != "")
		if err != nil {
			return err
		}
		products = append(products, r)
		printProductRun(fmt.Sprintf("%d: Boxoffice, %d buyers", round, *concurrency), r)
		for _, prep := range []bool{true, false} {
			if err := settle(); err != nil {
				return err
			}
			if stmtsOn && prep {
				if err := stmts.Reset(ctx, pg.Database()); err != nil {
					return err
				}
			}
			p, err := measurePGBench(ctx, g, pg, bench.PGBenchRun{Clients: *pgClients, Duration: *duration, Prepared: prep})
			if err != nil {
				return err
			}
			if stmtsOn && prep {
				if pgStatements, err = stmts.Read(ctx, pg.Database()); err != nil {
					return err
				}
			}
			label := "simple"
			if prep {
				prepared, label = append(prepared, p), "-M prepared"
			} else {
				plain = append(plain, p)
			}
			printPGBenchRun(fmt.Sprintf("%d: pgbench %s, %d clients", round, label, *pgClients), p)
		}
	}
	med := summarize(products, prepared, plain)

	rate := *fixedRate
	if rate <= 0 {
		rate = max(1, float64(int(min(med.ticketedPerSec, med.preparedTPS)/2)))
	}
	fixedProduct, err := windowOf([]string{"-rate", strconv.FormatFloat(rate, 'f', 1, 64)}, false)
	if err != nil {
		return err
	}
	printProductRun(fmt.Sprintf("fixed %.0f/s: Boxoffice", rate), fixedProduct)
	if err := settle(); err != nil {
		return err
	}
	fixedPG, err := measurePGBench(ctx, g, pg, bench.PGBenchRun{Clients: *pgClients, Duration: *duration, Prepared: true, Rate: rate})
	if err != nil {
		return err
	}
	printPGBenchRun(fmt.Sprintf("fixed %.0f/s: pgbench -M prepared", rate), fixedPG)

	last := products[len(products)-1]
	printRoundTrips(last)
	if last.Statements != nil {
		printStatements(last, pgStatements, prepared[len(prepared)-1])
	}
	printProfile(last)
	fmt.Printf("\nThe three figures (medians of %d rounds; goals from issue 25)\n", *rounds)
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	dbEff := med.preparedPGMs / med.pgMs
	fmt.Printf("  database efficiency  %5.2f  (pgbench -M prepared %.2f PostgreSQL ms/order ÷ Boxoffice %.2f)   goal ≥ %.1f: %s\n",
		dbEff, med.preparedPGMs, med.pgMs, goalDatabaseEfficiency, verdict(dbEff >= goalDatabaseEfficiency))
	fmt.Printf("                       %5.2f  against pgbench simple (%.2f ms/order)\n", med.plainPGMs/med.pgMs, med.plainPGMs)
	fmt.Printf("  product CPU/order    %5.2f ms (API, relay, consumers, NATS, runtime)                     goal ≤ %.1f ms: %s\n",
		med.productMs, goalProductMs, verdict(med.productMs <= goalProductMs))
	shared := med.ticketedPerSec / med.preparedTPS
	fmt.Printf("  shared-machine ratio %5.2f  (%.0f ticketed/s in the steady state ÷ pgbench -M prepared %.0f orders/s)      goal ≥ %.1f: %s\n",
		shared, med.ticketedPerSec, med.preparedTPS, goalSharedRatio, verdict(shared >= goalSharedRatio))
	fmt.Printf("                       %5.2f  against pgbench simple (%.0f orders/s)\n", med.ticketedPerSec/med.plainTPS, med.plainTPS)
	fmt.Printf("                       %5.2f  over the whole window, filling and draining included (%.0f ticketed/s)\n", med.wholePerSec/med.preparedTPS, med.wholePerSec)
	if med.busyShare > 0 {
		fmt.Printf("                              the machine %.0f%% busy in Boxoffice's steady states (/proc/stat): below 100%% the rate is bound by the buyers' latency or by R (the cuts above), not the CPU\n", med.busyShare*100)
	}
	fmt.Printf("  round trips/order    %5.1f  (pgbench's script: %d)                                     goal ≤ %d: %s\n",
		med.roundTrips, pgbenchPurchaseRoundTrips, goalRoundTrips, verdict(med.roundTrips <= goalRoundTrips))
	if fixedProduct.Result.Ticketed > 0 && fixedPG.TPS > 0 {
		fmt.Printf("  at a fixed %.0f/s     database efficiency %.2f (pgbench %.2f ÷ Boxoffice %.2f PostgreSQL ms/order); product %.2f ms/order\n",
			rate, fixedPG.pgMsPerOrder()/fixedProduct.perOrder(fixedProduct.CPU.Postgres), fixedPG.pgMsPerOrder(),
			fixedProduct.perOrder(fixedProduct.CPU.Postgres), fixedProduct.perOrder(fixedProduct.CPU.Product))
	}
	if *costsOut != "" {
		return writeCosts(*costsOut, med, strings.Join(append([]string{"boxoffice-lab", "bench", "purchases"}, args...), " "))
	}
	return nil
}

// medians are the rounds' medians.
type medians struct {
	// ticketedPerSec is the product's steady-state rate (past the warm-up,
	// before the drain); wholePerSec its rate over the whole window.
	ticketedPerSec, wholePerSec, preparedTPS, plainTPS float64
	// busyShare is the machine's busy share in the product's windows'
	// steady states.
	busyShare                                 float64
	pgMs, productMs, stripeMs, buyersMs       float64
	preparedPGMs, plainPGMs                   float64
	roundTrips, eventsPerOrder, eventBytesAvg float64
	apiMs, workerMs                           float64
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func summarize(products []productRun, prepared, plain []pgbenchRun) medians {
	col := func(f func(productRun) float64) float64 {
		var xs []float64
		for _, r := range products {
			if r.Result.Ticketed > 0 {
				xs = append(xs, f(r))
			}
		}
		return median(xs)
	}
	pcol := func(runs []pgbenchRun, f func(pgbenchRun) float64) float64 {
		var xs []float64
		for _, r := range runs {
			xs = append(xs, f(r))
		}
		return median(xs)
	}
	m := medians{
		ticketedPerSec: col(func(r productRun) float64 { return r.Result.SteadyPerSec() }),
		wholePerSec:    col(func(r productRun) float64 { return r.Result.TicketedPerSec() }),
		busyShare:      col(productRun.steadyBusyShare),
		pgMs:           col(func(r productRun) float64 { return r.perOrder(r.CPU.Postgres) }),
		productMs:      col(func(r productRun) float64 { return r.perOrder(r.CPU.Product) }),
		stripeMs:       col(func(r productRun) float64 { return r.perOrder(r.CPU.Stripe) }),
		buyersMs:       col(func(r productRun) float64 { return r.perOrder(r.CPU.Buyers) }),
		roundTrips:     col(func(r productRun) float64 { return float64(roundTrips(r.Costs)) / float64(r.Result.Ticketed) }),
		eventsPerOrder: col(func(r productRun) float64 { return float64(r.Stream.Messages) / float64(r.Result.Ticketed) }),
		eventBytesAvg: col(func(r productRun) float64 {
			if r.Stream.Messages == 0 {
				return 0
			}
			return float64(r.Stream.Bytes) / float64(r.Stream.Messages)
		}),
		apiMs:        col(func(r productRun) float64 { return r.perOrder(r.CPU.Product) * r.share(isAPIPart) }),
		preparedTPS:  pcol(prepared, func(r pgbenchRun) float64 { return r.TPS }),
		plainTPS:     pcol(plain, func(r pgbenchRun) float64 { return r.TPS }),
		preparedPGMs: pcol(prepared, pgbenchRun.pgMsPerOrder),
		plainPGMs:    pcol(plain, pgbenchRun.pgMsPerOrder),
	}
	m.workerMs = m.productMs - m.apiMs
	return m
}

// isAPIPart says which profile parts are the API's; the rest of the
// product is its workers' (relay, consumers, NATS) or the runtime's, which
// share says of the API in proportion.
func isAPIPart(name string) bool { return strings.HasPrefix(name, "API") || name == "waiting room" }

// share is the fraction of the product's profile in the parts pick names,
// the runtime's and other samples spread in proportion.
func (r productRun) share(pick func(string) bool) float64 {
	var in, attributed float64
	for _, s := range r.Shares {
		if s.Part == bench.RuntimePart || s.Part == bench.OtherPart {
			continue
		}
		attributed += s.Seconds
		if pick(s.Part) {
			in += s.Seconds
		}
	}
	if attributed == 0 {
		return 0
	}
	return in / attributed
}

// roundTrips are the product's round trips in costs.
func roundTrips(costs []db.RoleCost) int64 {
	var n int64
	for _, c := range costs {
		n += c.RoundTrips
	}
	return n
}

// measureProduct runs one window of buyers and reads every part's CPU
// around it: from the start signal to the moment the product has finished
// the work of the purchases made (outbox empty, no consumer behind).
func measureProduct(ctx context.Context, g *cpuGroups, ctl controlClient, secrets benchSecrets, args []string, steady steadyWindow,
	profile bool, profilePath string, atStart func() error) (productRun, error) {
	var r productRun
	if err := ctl.post(ctx, "/reset", nil); err != nil {
		return r, err
	}
	var ok struct{ Ready bool }
	buyers, err := startPart(ctx, g.buyers, secrets.env(), &ok, args...)
	if err != nil {
		return r, err
	}
	defer buyers.stop()
	var before streamSize
	if err := ctl.get(ctx, "/stream", &before); err != nil {
		return r, err
	}
	if err := ctl.post(ctx, "/profile/start", nil); err != nil {
		return r, err
	}
	if err := ctl.post(ctx, "/reset", nil); err != nil {
		return r, err
	}
	if err := atStart(); err != nil {
		return r, err
	}
	start := g.read()
	if _, err := io.WriteString(buyers.in, "go\n"); err != nil {
		return r, err
	}
	steadyCPU := steady.read(g)
	if err := buyers.read(&r.Result); err != nil {
		return r, err
	}
	r.Steady = <-steadyCPU
	if err := ctl.waitDrained(ctx); err != nil {
		return r, err
	}
	r.CPU = g.read().sub(start)
	var prof []byte
	if err := ctl.post(ctx, "/profile/stop", &prof); err != nil {
		return r, err
	}
	if err := ctl.get(ctx, "/costs", &r.Costs); err != nil {
		return r, err
	}
	if err := ctl.get(ctx, "/rate-cuts", &r.RateCuts); err != nil {
		return r, err
	}
	var after streamSize
	if err := ctl.get(ctx, "/stream", &after); err != nil {
		return r, err
	}
	r.Stream = streamSize{Messages: after.Messages - before.Messages, Bytes: after.Bytes - before.Bytes}
	r.Shares, r.Total, _ = bench.SplitProfile(prof, profileParts)
	if profile {
		if err := os.WriteFile(profilePath, prof, 0o644); err != nil {
			return r, err
		}
	}
	return r, nil
}

func measurePGBench(ctx context.Context, g *cpuGroups, pg bench.PGBench, run bench.PGBenchRun) (pgbenchRun, error) {
	run.Group = g.pgbench
	before := g.read()
	tps, err := pg.RunWith(ctx, run)
	return pgbenchRun{TPS: tps, Duration: run.Duration, CPU: g.read().sub(before)}, err
}

func ms(d time.Duration, n float64) string {
	if n == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)/n)
}

func printProductRun(label string, r productRun) {
	n := float64(r.Result.Ticketed)
	failed := strconv.Itoa(r.Result.Failed) + " failed"
	if len(r.Result.FailedAt) > 0 {
		var at []string
		for step, k := range r.Result.FailedAt {
			at = append(at, fmt.Sprintf("%s %d", step, k))
		}
		slices.Sort(at)
		failed += ": " + strings.Join(at, ", ")
	}
	fmt.Printf("%-40s %10.0f %9s %9s %9s %9s %9s   (whole window %.0f/s, p50 %s, p99 %s, %s)\n", label, r.Result.SteadyPerSec(),
		ms(r.CPU.Postgres, n), ms(r.CPU.Product, n), ms(r.CPU.Stripe, n), ms(r.CPU.Buyers, n), "",
		r.Result.TicketedPerSec(), r.Result.P50.Round(time.Millisecond), r.Result.P99.Round(time.Millisecond), failed)
	p50 := func(d [2]time.Duration) time.Duration { return d[0].Round(time.Millisecond) }
	fmt.Printf("%-40s p50 of each hop: hold %s, hold → PaymentIntent %s, card confirmed %s, authorized → ticketed %s\n", "",
		p50(r.Result.Hold), p50(r.Result.HoldToIntent), p50(r.Result.Confirm), p50(r.Result.AuthorizedToTicketed))
	if len(r.RateCuts) > 0 {
		var cuts []string
		for reason, n := range r.RateCuts {
			cuts = append(cuts, fmt.Sprintf("%s %.0f", reason, n))
		}
		slices.Sort(cuts)
		fmt.Printf("%-40s the release controller cut R (%s): admission, not the machine, paced part of this window\n", "", strings.Join(cuts, ", "))
	}
}

func printPGBenchRun(label string, r pgbenchRun) {
	n := r.TPS * r.Duration.Seconds()
	fmt.Printf("%-40s %10.0f %9s %9s %9s %9s %9s\n", label, r.TPS, ms(r.CPU.Postgres, n), "", "", "", ms(r.CPU.PGBench, n))
}

// printRoundTrips prints the product's PostgreSQL work per ticketed
// order, by role.
func printRoundTrips(r productRun) {
	if r.Result.Ticketed == 0 {
		return
	}
	n := float64(r.Result.Ticketed)
	fmt.Printf("\n  %-44s %9s %9s %9s %9s %9s\n", "PostgreSQL work per ticketed order, by role", "trips", "tx", "write tx", "stmts", "rows")
	var total db.Cost
	for _, c := range r.Costs {
		fmt.Printf("  %-44s %9.2f %9.2f %9.2f %9.2f %9.2f\n", c.Role, float64(c.RoundTrips)/n, float64(c.Transactions)/n,
			float64(c.WriteTransactions)/n, float64(c.Statements)/n, float64(c.RowsWritten)/n)
		total.RoundTrips += c.RoundTrips
		total.Transactions += c.Transactions
		total.WriteTransactions += c.WriteTransactions
		total.Statements += c.Statements
		total.RowsWritten += c.RowsWritten
	}
	fmt.Printf("  %-44s %9.2f %9.2f %9.2f %9.2f %9.2f\n", "Boxoffice", float64(total.RoundTrips)/n, float64(total.Transactions)/n,
		float64(total.WriteTransactions)/n, float64(total.Statements)/n, float64(total.RowsWritten)/n)
}

// printStatements prints where PostgreSQL's work per order goes, by
// pg_stat_statements: the product's last window beside the last pgbench
// -M prepared window, in total, then the product's costliest statements.
// Buffers and WAL records are exact counts; executor time is wall time,
// lock waits included.
func printStatements(r productRun, pgb []bench.Statement, p pgbenchRun) {
	n := float64(r.Result.Ticketed)
	pn := p.TPS * p.Duration.Seconds()
	if n == 0 || pn == 0 {
		return
	}
	sum := func(s []bench.Statement) (calls, blocks, wal int64, execMs float64) {
		for _, st := range s {
			calls, blocks, wal, execMs = calls+st.Calls, blocks+st.Blocks, wal+st.WALRecords, execMs+st.ExecMs
		}
		return
	}
	fmt.Printf("\n  %-44s %9s %9s %9s %9s\n", "PostgreSQL's work per order (pg_stat_statements)", "stmts", "buffers", "WAL recs", "exec ms")
	for _, row := range []struct {
		label string
		s     []bench.Statement
		n     float64
	}{{"Boxoffice (last window)", r.Statements, n}, {"pgbench -M prepared (last window)", pgb, pn}} {
		calls, blocks, wal, execMs := sum(row.s)
		fmt.Printf("  %-44s %9.2f %9.1f %9.1f %9.2f\n", row.label, float64(calls)/row.n, float64(blocks)/row.n, float64(wal)/row.n, execMs/row.n)
	}
	fmt.Printf("  Boxoffice's costliest statements\n")
	for i, st := range r.Statements {
		if i == 12 {
			break
		}
		fmt.Printf("    %-42s %9.2f %9.1f %9.1f %9.2f\n", st.Name, float64(st.Calls)/n, float64(st.Blocks)/n, float64(st.WALRecords)/n, st.ExecMs/n)
	}
}

// printProfile splits the product's CPU per order by its profile.
func printProfile(r productRun) {
	if r.Total == 0 || r.Result.Ticketed == 0 {
		return
	}
	perOrder := r.perOrder(r.CPU.Product)
	fmt.Printf("\n  product CPU per ticketed order, %.2f ms, by its profile\n", perOrder)
	for _, s := range r.Shares {
		fmt.Printf("    %-66s %6.2f ms\n", s.Part, perOrder*s.Seconds/r.Total)
	}
}

// writeCosts writes the capacity model's input (lab/capacity).
func writeCosts(path string, m medians, source string) error {
	c := capacity.Costs{
		MachineCores: float64(runtime.NumCPU()), TicketedPerSec: m.ticketedPerSec, MachineBusyShare: m.busyShare,
		PostgresMsPerOrder: m.pgMs, ProductMsPerOrder: m.productMs, APIMsPerOrder: m.apiMs, WorkerMsPerOrder: m.workerMs,
		BuyersMsPerOrder: m.buyersMs, StripeMsPerOrder: m.stripeMs, RoundTripsPerOrder: m.roundTrips,
		EventsPerOrder: m.eventsPerOrder, EventBytesAvg: m.eventBytesAvg, MeasuredAt: time.Now().UTC(), Source: source,
	}
	return c.Save(path)
}

// controlClient calls the product part's control address.
type controlClient struct{ base string }

func (c controlClient) do(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("product control %s: %w", path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("product control %s: %s: %s", path, res.Status, body)
	}
	switch out := out.(type) {
	case nil:
		return nil
	case *[]byte:
		*out = body
		return nil
	default:
		return json.Unmarshal(body, out)
	}
}

func (c controlClient) get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, out)
}

func (c controlClient) post(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodPost, path, out)
}

// waitDrained waits until the product has nothing left to do for the
// purchases made, at most a minute.
func (c controlClient) waitDrained(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var d struct{ Pending uint64 }
		if err := c.get(ctx, "/drained", &d); err != nil {
			return err
		}
		if d.Pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the product still had %d events to handle a minute after the buyers stopped", d.Pending)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// settleServer vacuums the databases of urls and checkpoints the server
// of adminURL, outside any measured window.
func settleServer(ctx context.Context, adminURL string, urls ...string) error {
	for _, u := range urls {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			return fmt.Errorf("settle: %w", err)
		}
		_, err = conn.Exec(ctx, "VACUUM ANALYZE")
		conn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return fmt.Errorf("settle: vacuum analyze: %w", err)
		}
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("settle: checkpoint: %w", err)
	}
	return nil
}

// postmasterPID reads the server's process id from its data directory.
func postmasterPID(dataDir string) (int, error) {
	raw, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("read postmaster.pid: %w", err)
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// compareGOGC runs, in each of rounds, one product window per GOGC value,
// in turn, and prints the medians of the product's CPU per ticketed order
// and its peak resident memory by value: the measurement behind
// roles.DefaultGCPercent (docs/performance.md).
func compareGOGC(values []string, rounds int, duration time.Duration, concurrency int, g *cpuGroups,
	windowOf func(buyerFlags []string, profile bool, extraEnv ...string) (productRun, error),
) error {
	variants := make([]variant, len(values))
	for i, v := range values {
		if n, err := strconv.Atoi(v); (err != nil || n <= 0) && v != "off" {
			return fmt.Errorf("-product-gogc: %q is not a GOGC value", v)
		}
		variants[i] = variant{label: "GOGC=" + v, env: []string{"GOGC=" + v}}
	}
	fmt.Printf("boxoffice-lab bench purchases -product-gogc %s — %d rounds of %s product windows, %d buyers; CPU by %s\n\n",
		strings.Join(values, ","), rounds, duration, concurrency, g.groups.Method())
	compareProduct(variants, rounds, concurrency, windowOf)
	return nil
}

// compareTracing runs, in each of rounds, a product window with tracing
// off and one with tracing on, in turn, the spans exported over OTLP/HTTP
// to a receiver in this process (so its CPU is neither the product's nor
// PostgreSQL's), and prints the medians of each and the spans per order:
// what tracing costs a purchase (docs/performance.md, "Tracing").
func compareTracing(ctx context.Context, rounds int, duration time.Duration, concurrency int, g *cpuGroups,
	windowOf func(buyerFlags []string, profile bool, extraEnv ...string) (productRun, error),
) error {
	sink, err := newOTLPSink(ctx)
	if err != nil {
		return err
	}
	defer sink.close()
	fmt.Printf("boxoffice-lab bench purchases -tracing — %d rounds of %s product windows, %d buyers, tracing off and on; CPU by %s\n\n",
		rounds, duration, concurrency, g.groups.Method())
	on := variant{label: "tracing on", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + sink.url, "OTEL_BSP_SCHEDULE_DELAY=1000"}, sink: sink}
	compareProduct([]variant{{label: "tracing off"}, on}, rounds, concurrency, windowOf)
	return nil
}

// variant is one configuration of the product that compareProduct
// measures: its label and the environment it adds.
type variant struct {
	label string
	env   []string
	// sink, when set, counts the spans the variant's windows export.
	sink *otlpSink
}

// compareProduct runs, in each of rounds, one product window per variant,
// in turn, and prints each window and the medians by variant: orders per
// second, PostgreSQL's and the product's CPU per ticketed order, peak
// resident memory, and spans per order where the variant exports them.
func compareProduct(variants []variant, rounds, concurrency int,
	windowOf func(buyerFlags []string, profile bool, extraEnv ...string) (productRun, error),
) {
	fmt.Printf("%-40s %10s %9s %9s %9s %9s %9s\n", "window", "orders/s", "pg ms", "product", "stripe", "buyers", "peak RSS")
	runs := make([][]productRun, len(variants))
	spans := make([][]float64, len(variants))
	for round := 1; round <= rounds; round++ {
		for i, v := range variants {
			before := v.sink.count()
			// The last round's last window writes -cpuprofile when it is set.
			r, err := windowOf([]string{"-concurrency", strconv.Itoa(concurrency)}, round == rounds && i == len(variants)-1, v.env...)
			if err != nil {
				fmt.Printf("%-40s failed: %v\n", fmt.Sprintf("%d: %s", round, v.label), err)
				continue
			}
			runs[i] = append(runs[i], r)
			n := float64(r.Result.Ticketed)
			if v.sink != nil && n > 0 {
				spans[i] = append(spans[i], float64(v.sink.count()-before)/n)
			}
			fmt.Printf("%-40s %10.0f %9s %9s %9s %9s %8.0fM\n", fmt.Sprintf("%d: %s", round, v.label), r.Result.SteadyPerSec(),
				ms(r.CPU.Postgres, n), ms(r.CPU.Product, n), ms(r.CPU.Stripe, n), ms(r.CPU.Buyers, n), float64(r.PeakRSS)/(1<<20))
			printProfile(r)
			printRoundTrips(r)
		}
	}
	fmt.Printf("\nMedians of %d rounds\n", rounds)
	fmt.Printf("%-12s %10s %12s %16s %14s %15s\n", "variant", "orders/s", "pg ms/order", "product ms/order", "peak RSS", "spans/order")
	for i, v := range variants {
		var rate, pgMs, productMs, rss []float64
		for _, r := range runs[i] {
			rate = append(rate, r.Result.SteadyPerSec())
			pgMs = append(pgMs, r.perOrder(r.CPU.Postgres))
			productMs = append(productMs, r.perOrder(r.CPU.Product))
			rss = append(rss, float64(r.PeakRSS)/(1<<20))
		}
		perOrder := "—"
		if len(spans[i]) > 0 {
			perOrder = fmt.Sprintf("%.1f", median(spans[i]))
		}
		fmt.Printf("%-12s %10.0f %12.2f %16.2f %13.0fM %15s\n", v.label, median(rate), median(pgMs), median(productMs), median(rss), perOrder)
	}
}

// peakRSS is process pid's peak resident memory (VmHWM of
// /proc/<pid>/status) in bytes, 0 where it cannot be read.
func peakRSS(pid int) int64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}
