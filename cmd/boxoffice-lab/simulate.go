package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/term"

	"boxoffice/lab/simulator"
	"boxoffice/ops/audit"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
)

// errOnsaleBroken makes `boxoffice-lab simulate` exit non-zero after a run that
// oversold a seat or whose audit found a broken invariant.
var errOnsaleBroken = errors.New("a seat was oversold or the audit failed (see the summary)")

// runSimulate runs `boxoffice-lab simulate`: an onsale simulation against --api
// (or a stack it spawns), the invariant audit, the summary and, with
// --report, the HTML report.
func runSimulate(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) (err error) {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	apiFlag := fs.String("api", "http://127.0.0.1:8080", "API base URL(s), comma-separated; ignored with --spawn")
	buyers := fs.Int("buyers", 1000, "buyers who arrive")
	seats := fs.Int("seats", 100, "seats of the event the simulator creates")
	eventID := fs.String("event", "", "sell this existing event instead of creating one")
	organizer := fs.String("organizer", "", "organizer id to act as (must own --event for the onsale signals); default random")
	arrival := fs.String("arrival", simulator.ArrivalSpike, "arrival pattern: spike, ramp or steady")
	duration := fs.Duration("duration", 30*time.Second, "window over which buyers arrive")
	payRatio := fs.Float64("pay-ratio", 0.9, "share of buyers with a hold who pay; half the rest decline, half walk away")
	patience := fs.Duration("patience", 10*time.Minute, "how long a buyer stays queued before leaving")
	bestAvailable := fs.Float64("best-available", 0, "share of buyers who ask for the best available seats of a category instead of choosing from the seat map")
	presale := fs.Float64("presale", 0, "share of buyers given a presale code: a presale of --presale-for opens the onsale, then the general sale (the other buyers arrive over --duration)")
	presaleFor := fs.Duration("presale-for", 0, "how long the presale lasts; default --duration")
	settle := fs.Duration("settle", 6*time.Minute, "after the last buyer, how long to wait for walked-away holds to expire (at least the stack's hold TTL)")
	reportDir := fs.String("report", "", "write report.html, summary.png and result.json to this directory")
	spawn := fs.Bool("spawn", false, "run the stack as separate processes of this binary (3 NATS nodes, 2 API, relay, 2 workers) on a fresh database on DATABASE_URL's server")
	chaos := fs.Bool("chaos", false, "with --spawn: SIGKILL and restart a relay, a worker and a NATS node at random moments")
	holdTTL := fs.Duration("hold-ttl", time.Minute, "with --spawn: hold lifetime")
	admissionRate := fs.Float64("admission-rate", 50, "with --spawn: the R (admissions/s) the release controller starts at; the product's default, 200, is a production cell's, twice what this stack sustains on 2 cores with the buyers beside it (docs/performance.md)")
	freshDB := fs.Bool("fresh-db", true, "with --spawn: create (and afterwards drop) a new database; false uses DATABASE_URL's database as is")
	keepDB := fs.Bool("keep-db", false, "with --spawn: keep the fresh database")
	paymentsFlag := fs.String("payments", simulator.PaymentsStripe, "with --spawn: stripe (the product's Stripe client against an in-memory Stripe stand-in in a process of its own, as production pays Stripe over the network) or sandbox (the development sandbox inside the API processes, on their database and connections)")
	keepLogs := fs.Bool("keep-logs", false, "with --spawn: keep the processes' logs after a run that upheld the invariants (a failed run always keeps them)")
	sharedRoom := fs.Bool("shared-waiting-room", true, "the --api processes share one waiting room (Redis); false sums R over them")
	progress := fs.String("progress", "auto", "auto, bars or plain")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of this process (the simulated buyers, not the stack) to this file")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if *chaos && !*spawn {
		return errors.New("--chaos needs --spawn: it kills processes it started")
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "simulator")

	cfg := simulator.Config{
		APIs: strings.Split(*apiFlag, ","), SharedWaitingRoom: *sharedRoom, JWTSecret: []byte(getenv("BOXOFFICE_JWT_SECRET")),
		EventID: *eventID, Buyers: *buyers, Seats: *seats, Arrival: *arrival, Duration: *duration, PayRatio: *payRatio,
		Patience: *patience, SettleTimeout: *settle, Logger: logger,
		BestAvailable: *bestAvailable, Presale: *presale, PresaleFor: *presaleFor,
	}
	if *organizer != "" {
		id, err := uuid.Parse(*organizer)
		if err != nil {
			return fmt.Errorf("--organizer: %w", err)
		}
		cfg.OrganizerID = id
	}
	dbURL, natsURL := getenv("DATABASE_URL"), getenv("NATS_URL")
	// Each part in a CPU group of its own: the spawned stack's processes
	// by role, the run's PostgreSQL backends, and this process.
	meter, err := simulator.NewCPUMeter()
	if err != nil {
		return err
	}
	defer meter.Close()
	var stack *simulator.Stack
	if *spawn {
		if dbURL == "" {
			return errors.New("DATABASE_URL is required with --spawn: it names the PostgreSQL server for the run's database")
		}
		dir, derr := os.MkdirTemp("", "boxoffice-onsale-")
		if derr != nil {
			return fmt.Errorf("stack dir: %w", derr)
		}
		fmt.Fprintf(stdout, "Starting the stack (logs in %s)…\n", dir)
		stack, err = simulator.StartStack(ctx, simulator.StackConfig{
			Dir: dir, DatabaseURL: dbURL, FreshDatabase: *freshDB, KeepDatabase: *keepDB,
			JWTSecret: getenv("BOXOFFICE_JWT_SECRET"), HoldTTL: *holdTTL, RedisURL: getenv("REDIS_URL"), Logger: logger,
			StartedFunc: meter.Place, AdmissionRate: *admissionRate, Payments: *paymentsFlag,
		})
		if err != nil {
			return err
		}
		defer func() {
			stack.Close(context.WithoutCancel(ctx))
			if err == nil && !*keepLogs {
				_ = os.RemoveAll(dir)
			} else {
				fmt.Fprintf(stdout, "Process logs: %s\n", dir)
			}
		}()
		cfg.APIs, cfg.JWTSecret, cfg.SharedWaitingRoom = stack.APIs, []byte(stack.JWTSecret), getenv("REDIS_URL") != ""
		cfg.StripeBase = stack.StripeBase
		dbURL, natsURL = stack.DatabaseURL, stack.NATSURL
		if name := stack.DatabaseName(); name != "" && *keepDB {
			fmt.Fprintf(stdout, "Database %s (kept).\n", name)
		}
	}
	if err := meter.AddSelf(os.Getpid()); err != nil {
		return err
	}
	sim, err := simulator.New(cfg)
	if err != nil {
		return err
	}

	terminal := false
	if f, ok := stdout.(*os.File); ok {
		terminal = term.IsTerminal(int(f.Fd()))
	}
	switch *progress {
	case "bars":
		terminal = true
	case "plain":
		terminal = false
	}
	start := time.Now()
	var chaosDone chan []simulator.ChaosEvent
	stopChaos := func() {}
	if *chaos {
		// Kill only while buyers arrive and a little after, so the run
		// ends with every process up.
		cctx, cancel := context.WithTimeout(ctx, *duration+15*time.Second)
		stopChaos = cancel
		chaosDone = make(chan []simulator.ChaosEvent, 1)
		go func() {
			evs, err := stack.Chaos(cctx, start)
			if err != nil {
				logger.ErrorContext(ctx, "chaos", "error", err.Error())
			}
			chaosDone <- evs
		}()
	}
	if *cpuProfile != "" {
		f, perr := os.Create(*cpuProfile)
		if perr != nil {
			return fmt.Errorf("--cpuprofile: %w", perr)
		}
		defer f.Close()
		if perr := pprof.StartCPUProfile(f); perr != nil {
			return fmt.Errorf("--cpuprofile: %w", perr)
		}
		defer pprof.StopCPUProfile()
	}
	stopBackends := func() {}
	if stack != nil {
		stopBackends = trackBackends(ctx, stack, meter, logger)
	}
	// CPU over the opening, the arrivals (the spike) and the whole run.
	cpuStart := meter.Read()
	cpuOpening := readCPUAfter(meter, min(simulator.OpeningWindow, *duration))
	cpuArrivals := readCPUAfter(meter, *duration)
	stopProgress := simulator.StartProgress(sim, stdout, terminal, 2*time.Second)
	res, err := sim.Run(ctx)
	stopProgress()
	cpuEnd := meter.Read()
	stopBackends()
	if res != nil {
		res.CPU = simulator.NewCPUReport(meter.Method(), cpuStart, cpuOpening(cpuEnd), cpuArrivals(cpuEnd), cpuEnd)
	}
	if chaosDone != nil {
		stopChaos()
		evs := <-chaosDone
		if res != nil {
			shift := res.Started.Sub(start).Seconds()
			for i := range evs {
				evs[i].T -= shift
			}
			res.Chaos = evs
		}
	}
	if err != nil {
		return err
	}

	if ctx.Err() != nil {
		fmt.Fprintln(stdout, "Interrupted: the summary and report cover the run so far.")
	}
	// An interrupted run still gets its audit, summary and report.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if dbURL != "" {
		var buf bytes.Buffer
		ok, err := runSimulateAudit(actx, dbURL, natsURL, &buf)
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		res.Audit, res.AuditOK = buf.String(), &ok
	} else {
		fmt.Fprintln(stdout, "Audit skipped: DATABASE_URL is unset.")
	}
	fmt.Fprintln(stdout)
	if err := res.WriteSummary(stdout); err != nil {
		return err
	}
	if res.Audit != "" {
		fmt.Fprintf(stdout, "\n%s", res.Audit)
	}
	if *reportDir != "" {
		if err := simulator.WriteReport(*reportDir, res); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "Report: %s/report.html\n", strings.TrimRight(*reportDir, "/"))
	}
	if !res.OK() {
		return errOnsaleBroken
	}
	return nil
}

// runSimulateAudit runs the invariant audit against the run's database and
// bus, and says whether every invariant holds.
func runSimulateAudit(ctx context.Context, dbURL, natsURL string, out io.Writer) (bool, error) {
	pool, err := db.NewPool(ctx, db.PoolConfig{URL: dbURL, MaxConns: 2})
	if err != nil {
		return false, err
	}
	defer pool.Close()
	var js jetstream.JetStream
	if natsURL != "" {
		nc, jsc, err := bus.Connect(natsURL, "boxoffice-onsale-audit", slog.New(slog.DiscardHandler))
		if err == nil {
			defer nc.Close()
			js = jsc
		} else {
			fmt.Fprintf(out, "NATS not reachable: %v\n", err)
		}
	}
	r, err := audit.Run(ctx, pool, js, audit.Thresholds{})
	if err != nil {
		return false, err
	}
	if err := r.Write(out); err != nil {
		return false, err
	}
	return r.OK(), nil
}

// trackBackends puts the run's PostgreSQL backends in the meter's
// postgres group as they connect, every 250 ms until stopped: the roles'
// pools open their connections on demand, and a backend's CPU counts from
// the reading after it is placed.
func trackBackends(ctx context.Context, stack *simulator.Stack, meter *simulator.CPUMeter, logger *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		warned := false
		for {
			pids, err := stack.Backends(ctx)
			if err != nil && ctx.Err() == nil && !warned {
				logger.WarnContext(ctx, "read the run's backends; PostgreSQL's part will be short", "error", err.Error())
				warned = true
			}
			meter.AddBackends(pids)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// readCPUAfter reads the meter d from now. The function it returns gives
// that reading, or end when the run ended first.
func readCPUAfter(meter *simulator.CPUMeter, d time.Duration) func(end simulator.CPUReading) simulator.CPUReading {
	read := make(chan simulator.CPUReading, 1)
	timer := time.AfterFunc(d, func() { read <- meter.Read() })
	return func(end simulator.CPUReading) simulator.CPUReading {
		if timer.Stop() {
			return end
		}
		return <-read
	}
}
