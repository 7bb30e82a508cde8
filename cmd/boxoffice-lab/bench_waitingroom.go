package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"boxoffice/cmd/boxoffice/roles"
	"boxoffice/domain/catalog"
	"boxoffice/domain/cells"
	"boxoffice/domain/purchase"
	"boxoffice/domain/waitingroom"
	"boxoffice/platform/auth"
	"boxoffice/platform/backoff"
)

// runBenchWaitingRoom measures the waiting room on real Redis (REDIS_URL,
// default redis://127.0.0.1:6379/0) and PostgreSQL (DATABASE_URL):
//
//  1. join + poll requests per second through the real HTTP handler, and
//     their p50/p99 latency, with the server's CPU per request (the load
//     generator runs as a child process, so this process's CPU time is the
//     server's), beside a minimal net/http handler running the same Redis
//     script on the same Redis, and the ratio of the two;
//  2. a simulated onsale: -buyers join, the admitter lets them through at
//     R, each admitted buyer holds two of -seats seats (real holds in
//     PostgreSQL, expiring after -hold-ttl), and the release controller
//     adapts R to the live holds in the database; R is printed every
//     second.
func runBenchWaitingRoom(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "load" {
		return runWaitingRoomLoad(ctx, args[1:])
	}
	fs := flag.NewFlagSet("bench waitingroom", flag.ExitOnError)
	duration := fs.Duration("duration", 10*time.Second, "length of the HTTP phase")
	clients := fs.Int("clients", 64, "concurrent HTTP clients")
	httpBuyers := fs.Int("http-buyers", 50_000, "buyers the HTTP clients take turns as (fewer: each polls more often, as a queued buyer does)")
	buyers := fs.Int("buyers", 100_000, "buyers in the simulated onsale")
	seats := fs.Int("seats", 5_000, "seats in the simulated onsale")
	simFor := fs.Duration("sim-duration", 40*time.Second, "longest the simulated onsale runs")
	holdTTL := fs.Duration("hold-ttl", 4*time.Second, "hold lifetime in the simulation (nobody pays)")
	capacity := fs.Int64("active-holds", 1000, "the controller's active-holds threshold: the cell's capacity in the simulation")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measured HTTP phase to this file")
	_ = fs.Parse(args)

	cfg, pool, cleanup, err := benchSetup(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	cfg.RedisURL = cmp.Or(os.Getenv("REDIS_URL"), "redis://127.0.0.1:6379/0")
	cfg.WaitingRoomIPLimit = -1 // every client is 127.0.0.1
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	prefix := "boxoffice-bench:" + randomHex(4) + ":"
	defer cleanRedis(context.WithoutCancel(ctx), cfg.RedisURL, prefix)

	if err := benchWaitingRoomHTTP(ctx, cfg, pool, logger, prefix+"http:", *duration, *clients, *httpBuyers, *cpuProfile); err != nil {
		return err
	}
	return benchOnsale(ctx, cfg, pool, logger, prefix+"sim:", onsaleSim{
		buyers: *buyers, seats: *seats, duration: *simFor, holdTTL: *holdTTL, capacity: *capacity,
	})
}

func benchWaitingRoomHTTP(ctx context.Context, cfg roles.Config, pool *pgxpool.Pool, logger *slog.Logger, prefix string, d time.Duration, clients, buyers int, cpuProfile string) error {
	cell, err := roles.BuildCell(ctx, cfg, roles.CellDeps{Name: cfg.Cell, Pool: pool, Logger: logger, Room: &roles.WaitingRoomOpts{RedisPrefix: prefix}})
	if err != nil {
		return err
	}
	defer cell.Close()
	g, gctx := errgroup.WithContext(ctx)
	serverCtx, stop := context.WithCancel(gctx)
	defer func() { stop(); _ = g.Wait() }()
	listen := func(h http.Handler) (string, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		g.Go(func() error { return roles.ServeHTTP(serverCtx, ln, h, logger) })
		return "http://" + ln.Addr().String(), nil
	}
	base, err := listen(roles.NewAPI(cfg, cells.Single(cell.Cell), logger, nil, nil).Handler())
	if err != nil {
		return err
	}
	for _, run := range cell.Runs {
		g.Go(func() error { return run(serverCtx) })
	}

	events := catalog.New(pool)
	newEvent := func() (uuid.UUID, error) {
		ev, err := events.CreateEvent(ctx, catalog.EventParams{
			OrganizerID: uuid.New(), Name: "bench", StartsAt: time.Now().Add(time.Hour), Currency: "eur", Cell: cfg.Cell,
			Sections: []catalog.Section{{Name: "A", Rows: 1, SeatsPerRow: 100, PriceMinor: 1000}},
		})
		return ev.ID, err
	}
	ev, err := newEvent()
	if err != nil {
		return err
	}
	// The minimal handler: plain net/http, no authentication, the same
	// store (the same Lua script, pipelined the same way) on the same
	// Redis, a hand-written answer.
	minStore := waitingroom.NewRedisStore(cell.Redis, waitingroom.RedisStoreConfig{Prefix: prefix + "min:"})
	minEv, err := newEvent()
	if err != nil {
		return err
	}
	minBase, err := listen(minimalWaitingRoom(minStore, cfg.AdmissionRate))
	if err != nil {
		return err
	}

	fmt.Printf("boxoffice-lab bench waitingroom — Redis %s, PostgreSQL %s\n\n", cfg.RedisURL, roles.RedactURL(cfg.DatabaseURL))
	fmt.Printf("HTTP join + poll, %d clients in a child process taking turns as %d buyers, %s per phase, event open at R=%.0f/s (most buyers queue)\n", clients, buyers, d, cfg.AdmissionRate)
	fmt.Printf("  server CPU = this process's getrusage over the phase (HTTP server, waiting room, admitter, controller);\n")
	fmt.Printf("  client CPU = the load generator's own getrusage over the phase; Redis from INFO cpu\n\n")

	// The profile, when asked for, covers the waiting room's phase and
	// only the server: the load generator is another process.
	var onStart, onEnd func() error
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		onStart = func() error { return pprof.StartCPUProfile(f) }
		onEnd = func() error { pprof.StopCPUProfile(); return nil }
	}
	wrRes, err := runLoadPhase(ctx, cell.Redis, base+"/v1/events/"+ev.String()+"/waiting-room", "jwt", clients, buyers, d, onStart, onEnd)
	if err != nil {
		return err
	}
	minRes, err := runLoadPhase(ctx, cell.Redis, minBase+"/v1/events/"+minEv.String()+"/waiting-room", "user", clients, buyers, d, nil, nil)
	if err != nil {
		return err
	}
	wrRes.print("waiting room (huma, bearer JWT, Room, signed admission tokens)")
	minRes.print("minimal net/http handler, same Redis script, no auth")
	fmt.Printf("  waiting room ÷ minimal: requests/s %.2f, server CPU per request %.2f\n\n",
		wrRes.perSecond()/minRes.perSecond(), wrRes.serverPerRequest().Seconds()/minRes.serverPerRequest().Seconds())
	return nil
}

// minimalWaitingRoom answers a join (POST) or poll (GET) with the store
// alone: the user id comes from X-User-Id, unauthenticated.
func minimalWaitingRoom(store *waitingroom.RedisStore, rate float64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, err := uuid.Parse(r.Header.Get("X-User-Id"))
		if err != nil {
			http.Error(w, "X-User-Id", http.StatusBadRequest)
			return
		}
		parts := strings.Split(r.URL.Path, "/")
		eventID, err := uuid.Parse(parts[len(parts)-2])
		if err != nil {
			http.Error(w, "event", http.StatusNotFound)
			return
		}
		p := waitingroom.JoinParams{
			EventID: eventID, UserID: user, IP: "127.0.0.1", Now: time.Now(), Limits: waitingroom.Limits{PerUser: 5},
			Phase: waitingroom.PhaseOpen, Rate: rate, Burst: max(1, rate), TTL: 15 * time.Minute,
		}
		var e waitingroom.Entry
		if r.Method == http.MethodPost {
			p.JTI = uuid.New()
			e, err = store.Join(r.Context(), p)
		} else {
			e, err = store.Poll(r.Context(), p)
		}
		if err != nil {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch e.Status {
		case waitingroom.StatusQueued:
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte(`{"status":"queued","position":` + strconv.FormatInt(e.Ahead+1, 10) + `}`))
		case waitingroom.StatusAdmitted:
			_, _ = w.Write([]byte(`{"status":"admitted"}`))
		case waitingroom.StatusLimited:
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})
}

// loadPhase is one measured phase: what the load generator saw and what
// each side spent.
type loadPhase struct {
	loadResult
	server, redis time.Duration
}

func (p loadPhase) perSecond() float64 { return float64(p.Requests) / p.Elapsed.Seconds() }

func (p loadPhase) serverPerRequest() time.Duration {
	return p.server / time.Duration(max(1, p.Requests))
}

func (p loadPhase) print(name string) {
	n := time.Duration(max(1, p.Requests))
	fmt.Printf("  %s\n", name)
	fmt.Printf("    requests      %d in %s = %.0f/s\n", p.Requests, p.Elapsed.Round(time.Millisecond), p.perSecond())
	fmt.Printf("    latency       p50 %s   p99 %s   max %s\n", p.P50.Round(10*time.Microsecond), p.P99.Round(10*time.Microsecond), p.Max.Round(10*time.Microsecond))
	fmt.Printf("    statuses      %v (200 admitted, 202 queued; 0 = transport error)\n", p.Statuses)
	fmt.Printf("    CPU           server %.2fs = %.0f%% of a core, %s per request; client %.2fs, %s per request; redis-server %.2fs, %s per request\n",
		p.server.Seconds(), 100*p.server.Seconds()/p.Elapsed.Seconds(), (p.server / n).Round(100*time.Nanosecond),
		p.ClientCPU.Seconds(), (p.ClientCPU / n).Round(100*time.Nanosecond), p.redis.Seconds(), (p.redis / n).Round(100*time.Nanosecond))
}

// runLoadPhase runs the load generator as a child process of this binary
// (`bench waitingroom load`), so that this process's CPU time over the
// phase is the server's alone, and returns what it measured.
func runLoadPhase(ctx context.Context, rdb *redis.Client, url, mode string, clients, buyers int, d time.Duration, onStart, onEnd func() error) (loadPhase, error) {
	bin, err := os.Executable()
	if err != nil {
		return loadPhase{}, err
	}
	cmd := exec.CommandContext(ctx, bin, "bench", "waitingroom", "load",
		"-url", url, "-mode", mode, "-clients", strconv.Itoa(clients), "-buyers", strconv.Itoa(buyers), "-duration", d.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return loadPhase{}, err
	}
	if err := cmd.Start(); err != nil {
		return loadPhase{}, fmt.Errorf("start the load generator: %w", err)
	}
	defer func() { _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	var (
		p              loadPhase
		cpu0, redis0   time.Duration
		started, ended bool
	)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "start":
			if onStart != nil {
				if err := onStart(); err != nil {
					return p, err
				}
			}
			cpu0, redis0, started = processCPU(), redisCPU(ctx, rdb), true
		case strings.HasPrefix(line, "done "):
			p.server, p.redis, ended = processCPU()-cpu0, redisCPU(ctx, rdb)-redis0, true
			if onEnd != nil {
				if err := onEnd(); err != nil {
					return p, err
				}
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "done ")), &p.loadResult); err != nil {
				return p, fmt.Errorf("load generator result: %w", err)
			}
		}
	}
	if err := cmd.Wait(); err != nil {
		return p, fmt.Errorf("load generator: %w", err)
	}
	if !started || !ended {
		return p, errors.New("load generator ended without a result")
	}
	return p, nil
}

// loadResult is what the load generator measured of one phase.
type loadResult struct {
	Requests      int
	Elapsed       time.Duration
	P50, P99, Max time.Duration
	Statuses      map[int]int
	// ClientCPU is the load generator's CPU time over the phase.
	ClientCPU time.Duration
}

// runWaitingRoomLoad is the load generator: clients each join then poll
// as one of -buyers buyers in turn (50,000 by default: each used at most
// once a second, under the per-buyer limit), for d. It prints "start" when the phase starts and
// "done <json>" with the result. mode jwt sends bearer tokens; mode user
// sends X-User-Id for the minimal handler.
func runWaitingRoomLoad(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench waitingroom load", flag.ExitOnError)
	url := fs.String("url", "", "waiting room URL")
	mode := fs.String("mode", "jwt", "jwt or user")
	clients := fs.Int("clients", 64, "concurrent clients")
	d := fs.Duration("duration", 10*time.Second, "phase length")
	nBuyers := fs.Int("buyers", 50_000, "buyers the clients take turns as")
	_ = fs.Parse(args)
	header, values := "Authorization", make([]string, *nBuyers)
	for i := range values {
		id := uuid.New()
		switch *mode {
		case "jwt":
			tok, err := auth.Mint([]byte(roles.DevJWTSecret), auth.Identity{UserID: id, Role: auth.RoleBuyer}, time.Hour)
			if err != nil {
				return err
			}
			values[i] = "Bearer " + tok
		default:
			header, values[i] = "X-User-Id", id.String()
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = *clients*2, *clients*2
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var (
		next     atomic.Int64
		mu       sync.Mutex
		lat      []time.Duration
		statuses = map[int]int{}
	)
	fmt.Println("start")
	cpu0 := processCPU()
	start := time.Now()
	deadline := start.Add(*d)
	var wg sync.WaitGroup
	for range *clients {
		wg.Go(func() {
			local := make([]time.Duration, 0, 1<<16)
			st := map[int]int{}
			for time.Now().Before(deadline) && ctx.Err() == nil {
				v := values[int(next.Add(1))%len(values)]
				for _, method := range []string{http.MethodPost, http.MethodGet} {
					req, _ := http.NewRequestWithContext(ctx, method, *url, nil)
					req.Header.Set(header, v)
					t0 := time.Now()
					res, err := hc.Do(req)
					if err != nil {
						st[0]++
						continue
					}
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					local = append(local, time.Since(t0))
					st[res.StatusCode]++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, local...)
			for k, v := range st {
				statuses[k] += v
			}
		})
	}
	wg.Wait()
	r := loadResult{Requests: len(lat), Elapsed: time.Since(start), Statuses: statuses, ClientCPU: processCPU() - cpu0}
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(float64(len(lat))*p))]
	}
	r.P50, r.P99, r.Max = pct(0.5), pct(0.99), pct(1)
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Printf("done %s\n", b)
	return nil
}

type onsaleSim struct {
	buyers, seats int
	duration      time.Duration
	holdTTL       time.Duration
	capacity      int64
}

func benchOnsale(ctx context.Context, cfg roles.Config, pool *pgxpool.Pool, logger *slog.Logger, prefix string, sim onsaleSim) error {
	cell, err := roles.BuildCell(ctx, cfg, roles.CellDeps{Name: cfg.Cell, Pool: pool, Logger: logger, Room: &roles.WaitingRoomOpts{
		RedisPrefix: prefix, PerUser: -1,
		// No relay runs here, so the outbox only grows: the simulation's
		// capacity signal is live holds.
		Thresholds: waitingroom.Thresholds{ActiveHolds: sim.capacity, OutboxAge: 24 * time.Hour},
	}})
	if err != nil {
		return err
	}
	defer cell.Close()
	room, ctl := cell.Room, cell.Room.Controller()
	ev, err := catalog.New(pool).CreateEvent(ctx, catalog.EventParams{
		OrganizerID: uuid.New(), Name: "simulated onsale", StartsAt: time.Now().Add(time.Hour), Currency: "eur", Cell: cfg.Cell,
		Sections: []catalog.Section{{Name: "A", Rows: max(1, sim.seats/50), SeatsPerRow: min(50, sim.seats), PriceMinor: 5000}},
	})
	if err != nil {
		return err
	}
	var seatIDs []uuid.UUID
	if err := pool.QueryRow(ctx, "SELECT array_agg(id ORDER BY position) FROM seats WHERE event_id = $1", ev.ID).Scan(&seatIDs); err != nil {
		return fmt.Errorf("list seats: %w", err)
	}
	// The onsale is scheduled: everyone joins the pre-queue, then it opens.
	if _, err := room.UpdateOnsale(ctx, ev.ID, func(s *waitingroom.Settings) {
		t := time.Now().Add(time.Hour)
		s.OpensAt = &t
	}); err != nil {
		return err
	}
	fmt.Printf("Simulated onsale: %d buyers for %d seats; holds last %s and nobody pays; capacity = %d live holds (the controller's threshold), so R should settle near %d/%s = %.0f/s\n",
		sim.buyers, len(seatIDs), sim.holdTTL, sim.capacity, sim.capacity, sim.holdTTL, float64(sim.capacity)/sim.holdTTL.Seconds())
	users := make([]uuid.UUID, sim.buyers)
	t0 := time.Now()
	jg, jctx := errgroup.WithContext(ctx)
	jg.SetLimit(64)
	for i := range users {
		users[i] = uuid.New()
		jg.Go(func() error {
			_, err := room.Join(jctx, users[i], ev.ID, "198.51.100.1")
			return err
		})
	}
	if err := jg.Wait(); err != nil {
		return fmt.Errorf("join: %w", err)
	}
	fmt.Printf("  %d buyers joined the pre-queue in %s (%.0f joins/s through Room.Join)\n", sim.buyers, time.Since(t0).Round(time.Millisecond), float64(sim.buyers)/time.Since(t0).Seconds())
	if _, err := room.UpdateOnsale(ctx, ev.ID, func(s *waitingroom.Settings) {
		t := time.Now()
		s.OpensAt = &t
	}); err != nil {
		return err
	}

	svc := purchase.NewService(pool, logger, purchase.Config{HoldTTL: sim.holdTTL})
	admitted := make(chan uuid.UUID, sim.buyers)
	var nAdmitted, nHeld, nConflict, nErr atomic.Int64
	runCtx, stop := context.WithTimeout(ctx, sim.duration)
	defer stop()
	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error { return ctl.Run(gctx) })
	g.Go(func() error {
		return backoff.Ticks(gctx, 100*time.Millisecond, func(gctx context.Context) error {
			got, err := room.AdmitEvent(gctx, ev.ID)
			if err != nil && gctx.Err() == nil {
				return err
			}
			nAdmitted.Add(int64(len(got)))
			for _, u := range got {
				admitted <- u
			}
			return nil
		})
	})
	for range 32 {
		g.Go(func() error {
			rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			for {
				var u uuid.UUID
				select {
				case <-gctx.Done():
					return nil
				case u = <-admitted:
				}
				for try := 0; try < 3; try++ {
					i := rng.IntN(len(seatIDs) - 1)
					start := time.Now()
					_, err := svc.Hold(gctx, purchase.HoldParams{
						UserID: u, EventID: ev.ID, SeatIDs: seatIDs[i : i+2], IdempotencyKey: fmt.Sprint("k", try), CorrelationID: "sim",
					})
					room.ObserveHold(time.Since(start))
					var unavailable *purchase.SeatUnavailableError
					switch {
					case err == nil:
						nHeld.Add(1)
					case errors.As(err, &unavailable):
						nConflict.Add(1)
						continue
					case gctx.Err() != nil:
						return nil
					default:
						nErr.Add(1)
					}
					break
				}
			}
		})
	}
	fmt.Printf("\n  %5s %8s %-20s %9s %8s %9s %9s %9s\n", "t", "R", "reason", "admitted", "queued", "holds", "conflicts", "liveHolds")
	report := time.NewTicker(time.Second)
	defer report.Stop()
	start := time.Now()
	for done := false; !done; {
		select {
		case <-gctx.Done():
			done = true
		case <-report.C:
			st := ctl.State()
			q, _ := room.Onsale(gctx, ev.ID)
			queued := "-"
			if q.QueueErr == nil {
				queued = fmt.Sprint(q.Queued)
			}
			fmt.Printf("  %4.0fs %8.0f %-20s %9d %8s %9d %9d %9d\n", time.Since(start).Seconds(), st.Rate, st.Reason,
				nAdmitted.Load(), queued, nHeld.Load(), nConflict.Load(), st.Signals.ActiveHolds)
			if q.QueueErr == nil && q.Queued == 0 && len(admitted) == 0 {
				stop()
			}
		}
	}
	if err := g.Wait(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	fmt.Printf("\n  %d admitted, %d holds, %d seat conflicts, %d errors in %s\n", nAdmitted.Load(), nHeld.Load(), nConflict.Load(), nErr.Load(), time.Since(start).Round(time.Second))
	return nil
}

// cleanRedis deletes the benchmark's keys.
func cleanRedis(ctx context.Context, url, prefix string) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		if keys = append(keys, iter.Val()); len(keys) == 1000 {
			_ = rdb.Unlink(ctx, keys...).Err()
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		_ = rdb.Unlink(ctx, keys...).Err()
	}
}

// processCPU is the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is the CPU time the Redis server has used, from INFO cpu.
func redisCPU(ctx context.Context, rdb *redis.Client) time.Duration {
	if rdb == nil {
		return 0
	}
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var total float64
	for _, line := range strings.Split(info, "\r\n") {
		for _, key := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, key); ok {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}
