package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/multitracer"
	"github.com/prometheus/client_golang/prometheus"

	"boxoffice/cmd/boxoffice/roles"
	"boxoffice/domain/waitingroom"
	"boxoffice/lab/bench"
	"boxoffice/lab/memstripe"
	"boxoffice/platform/db"
	"boxoffice/platform/telemetry"
)

// The parts of `bench purchases`, each a process of its own so that its
// CPU is read apart (bench.CPUGroups): the product (every role and the
// embedded JetStream, paying through its real Stripe client), the Stripe
// stand-in (lab/memstripe) and the buyers. They are this executable run
// as `boxoffice-lab bench-part <part>`; each prints one JSON line when it
// is ready, and the buyers then wait for a line on their standard input
// before they start.

// benchSecrets are one run's secrets, random, handed to its parts in their
// environment: the bench never runs the product on the public
// development secrets.
type benchSecrets map[string]string

func newBenchSecrets() benchSecrets {
	r := func(n int) string {
		b := make([]byte, n)
		_, _ = rand.Read(b)
		return base64.StdEncoding.EncodeToString(b)
	}
	return benchSecrets{
		"BOXOFFICE_JWT_SECRET":          r(32),
		"BOXOFFICE_ADMISSION_KEY":       r(32),
		"BOXOFFICE_TICKET_SIGNING_KEY":  r(32),
		"BOXOFFICE_WEBHOOK_SECRET_KEYS": "bench:" + r(32),
		"STRIPE_WEBHOOK_SECRET":         "whsec_" + randomHex(16),
		"STRIPE_SECRET_KEY":             "sk_test_" + randomHex(16),
	}
}

func (s benchSecrets) env(extra ...string) []string {
	env := os.Environ()
	for k, v := range s {
		env = append(env, k+"="+v)
	}
	return append(env, extra...)
}

// runBenchPart runs one part: hidden command bench-part.
func runBenchPart(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: boxoffice-lab bench-part product|stripe|buyers [flags]")
	}
	switch args[0] {
	case "product":
		return runProductPart(ctx, args[1:])
	case "stripe":
		return runStripePart(ctx, args[1:])
	case "buyers":
		return runBuyersPart(ctx, args[1:])
	}
	return fmt.Errorf("bench-part: no part %q", args[0])
}

// ready announces a part's addresses on its standard output.
func ready(v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", raw)
	return err
}

// streamSize is the TICKETING stream's messages and bytes so far.
type streamSize struct {
	Messages uint64 `json:"messages"`
	Bytes    uint64 `json:"bytes"`
}

// productPool is the bench product's pool: the roles' own (roles.Config.
// PoolConfig: size, region epoch, statement and lock timeouts), seen by
// tracer. Built by hand it once left out the region epoch, so the bench
// measured sessions the region fence never checks, while every deployed
// role's write statements each run the fence's read of region_epoch.
func productPool(cfg roles.Config, tracer pgx.QueryTracer) db.PoolConfig {
	pc := cfg.PoolConfig(cfg.DatabaseURL)
	pc.Tracer = tracer
	return pc
}

func runProductPart(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench-part product", flag.ExitOnError)
	apiAddr := fs.String("api-addr", "127.0.0.1:0", "the API's address")
	_ = fs.Parse(args)
	cfg, err := roles.LoadConfig(os.Getenv, "DATABASE_URL")
	if err != nil {
		return err
	}
	roles.SetGCPercent(os.Getenv) // as the product's roles start
	// Errors only, unless BOXOFFICE_LOG_LEVEL asks for more: a benchmark
	// of the product, not of its logging.
	level := slog.LevelError
	if os.Getenv("BOXOFFICE_LOG_LEVEL") != "" {
		level = cfg.LogLevel
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	stopTracing, err := roles.StartTracing(ctx, os.Getenv, "product", cfg, logger)
	if err != nil {
		return err
	}
	defer stopTracing()
	costs := db.NewCostTracer()
	var tracer pgx.QueryTracer = costs
	if t := telemetry.PgxTracer(); t != nil {
		tracer = multitracer.New(costs, t)
	}
	pool, err := db.NewPool(ctx, productPool(cfg, tracer))
	if err != nil {
		return err
	}
	defer pool.Close()
	nc, js, stopBus, err := benchBus(ctx, &cfg, logger)
	if err != nil {
		return err
	}
	defer stopBus()
	ln, err := net.Listen("tcp", *apiAddr)
	if err != nil {
		return err
	}
	ctl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var (
		mu      sync.Mutex
		profile bytes.Buffer
	)
	reg := roles.NewRegistry(pool)
	// The release controller's cuts of R since the last reset, by reason:
	// a window whose R was cut was paced by the waiting room, not by the
	// machine.
	var cutsAtReset map[string]float64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /reset", func(w http.ResponseWriter, _ *http.Request) {
		costs.Reset()
		mu.Lock()
		defer mu.Unlock()
		cutsAtReset = rateCuts(reg)
	})
	mux.HandleFunc("GET /rate-cuts", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		cuts := rateCuts(reg)
		for reason, n := range cuts {
			if cuts[reason] = n - cutsAtReset[reason]; cuts[reason] == 0 {
				delete(cuts, reason)
			}
		}
		_ = json.NewEncoder(w).Encode(cuts)
	})
	mux.HandleFunc("GET /costs", func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(costs.Costs()) })
	mux.HandleFunc("POST /profile/start", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		profile.Reset()
		if err := pprof.StartCPUProfile(&profile); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
		}
	})
	mux.HandleFunc("POST /profile/stop", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		pprof.StopCPUProfile()
		_, _ = w.Write(profile.Bytes())
	})
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		s, err := js.Stream(r.Context(), cfg.Streams.Namespace.Stream())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		info, err := s.Info(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(streamSize{Messages: info.State.Msgs, Bytes: info.State.Bytes})
	})
	// drained: nothing left in the outbox, nothing pending for any
	// consumer of the stream.
	mux.HandleFunc("GET /drained", func(w http.ResponseWriter, r *http.Request) {
		var outbox int64
		if err := pool.QueryRow(r.Context(), "SELECT count(*) FROM outbox").Scan(&outbox); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		pending := uint64(outbox)
		s, err := js.Stream(r.Context(), cfg.Streams.Namespace.Stream())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		for info := range s.ListConsumers(r.Context()).Info() {
			pending += info.NumPending + uint64(info.NumAckPending)
		}
		_ = json.NewEncoder(w).Encode(map[string]uint64{"pending": pending})
	})
	go func() { _ = http.Serve(ctl, mux) }() //nolint:gosec // loopback control of a benchmark part
	if err := ready(map[string]string{"api": "http://" + ln.Addr().String(), "control": "http://" + ctl.Addr().String()}); err != nil {
		return err
	}
	return roles.RunStack(ctx, cfg, pool, nc, js, ln, nil, logger, reg)
}

// rateCuts reads, from the product's registry, how often the release
// controller has cut R, by reason (boxoffice_admission_rate_changes_total
// but its increases).
func rateCuts(reg prometheus.Gatherer) map[string]float64 {
	cuts := map[string]float64{}
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() != "boxoffice_admission_rate_changes_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() != waitingroom.ReasonHealthy {
					cuts[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return cuts
}

func runStripePart(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench-part stripe", flag.ExitOnError)
	webhookURL := fs.String("webhook-url", "", "the product's Stripe ingress")
	addr := fs.String("addr", "127.0.0.1:0", "the address to listen on")
	_ = fs.Parse(args)
	s := memstripe.New(memstripe.Config{
		SecretKey: os.Getenv("STRIPE_SECRET_KEY"), WebhookURL: *webhookURL, WebhookSecret: os.Getenv("STRIPE_WEBHOOK_SECRET"),
		Logger: slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	go s.Run(ctx)
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := ready(map[string]string{"url": "http://" + ln.Addr().String()}); err != nil {
		return err
	}
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func runBuyersPart(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench-part buyers", flag.ExitOnError)
	api := fs.String("api", "", "the product's API")
	stripeBase := fs.String("stripe", "", "the Stripe stand-in")
	concurrency := fs.Int("concurrency", 64, "buyers at once (closed loop)")
	rate := fs.Float64("rate", 0, "purchases started per second (open loop), instead of -concurrency")
	duration := fs.Duration("duration", 10*time.Second, "how long purchases are started")
	warmup := fs.Duration("warmup", 0, "when the steady state begins, after the start; 0: no steady count")
	_ = fs.Parse(args)
	c := bench.NewClient(*api, []byte(os.Getenv("BOXOFFICE_JWT_SECRET")), max(*concurrency, 64)*2)
	c.StripeBase = *stripeBase
	ev, err := c.CreateEvent(ctx, 200, 500)
	if err != nil {
		return err
	}
	if err := ready(map[string]bool{"ready": true}); err != nil {
		return err
	}
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fmt.Errorf("wait for the start: %w", err)
	}
	run := bench.PurchaseRun{Concurrency: *concurrency, Duration: *duration, Warmup: *warmup}
	if *rate > 0 {
		run = bench.PurchaseRun{Rate: *rate, Duration: *duration, Warmup: *warmup}
	}
	res, err := c.RunPurchases(ctx, ev, run)
	if err != nil {
		return err
	}
	return ready(res)
}

// part is a running part process.
type part struct {
	child
	name  string
	out   *bufio.Reader
	in    io.WriteCloser
	group *bench.CPUGroup
}

// startPart starts a part in group and reads its ready line into ready.
func startPart(ctx context.Context, group *bench.CPUGroup, env []string, readyLine any, args ...string) (*part, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, append([]string{"bench-part"}, args...)...)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", args[0], err)
	}
	p := &part{child: newChild(cmd), name: args[0], out: bufio.NewReader(stdout), in: stdin, group: group}
	if err := group.Add(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	if err := p.read(readyLine); err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%s did not start: %w", args[0], err)
	}
	p.wait()
	return p, nil
}

// read decodes the part's next output line into v.
func (p *part) read(v any) error {
	line, err := p.out.ReadString('\n')
	if err != nil {
		return fmt.Errorf("read %s: %w", p.name, err)
	}
	return json.Unmarshal([]byte(strings.TrimSpace(line)), v)
}

// stop interrupts the part and waits for it.
func (p *part) stop() {
	// A part stopped by a signal exits non-zero: its exit status says
	// nothing about the measurement, and its output said why.
	p.end(os.Interrupt, 10*time.Second)
}
