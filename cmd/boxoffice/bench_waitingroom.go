package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
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

	"boxoffice/auth"
	"boxoffice/catalog"
	"boxoffice/purchase"
	"boxoffice/waitingroom"
)

// runBenchWaitingRoom measures the waiting room on real Redis (REDIS_URL,
// default redis://127.0.0.1:6379/0) and PostgreSQL (DATABASE_URL):
//
//  1. join + poll requests per second through the real HTTP handler, and
//     their p50/p99 latency;
//  2. a simulated onsale: -buyers join, the admitter lets them through at
//     R, each admitted buyer holds two of -seats seats (real holds in
//     PostgreSQL, expiring after -hold-ttl), and the release controller
//     adapts R to the live holds in the database; R is printed every
//     second.
func runBenchWaitingRoom(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench waitingroom", flag.ExitOnError)
	duration := fs.Duration("duration", 10*time.Second, "length of the HTTP phase")
	clients := fs.Int("clients", 64, "concurrent HTTP clients")
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

	if err := benchWaitingRoomHTTP(ctx, cfg, pool, logger, prefix+"http:", *duration, *clients, *cpuProfile); err != nil {
		return err
	}
	return benchOnsale(ctx, cfg, pool, logger, prefix+"sim:", onsaleSim{
		buyers: *buyers, seats: *seats, duration: *simFor, holdTTL: *holdTTL, capacity: *capacity,
	})
}

func benchWaitingRoomHTTP(ctx context.Context, cfg config, pool *pgxpool.Pool, logger *slog.Logger, prefix string, d time.Duration, clients int, cpuProfile string) error {
	wr, err := newWaitingRoom(ctx, cfg, pool, logger, nil, waitingRoomOpts{redisPrefix: prefix})
	if err != nil {
		return err
	}
	defer wr.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	serverCtx, stop := context.WithCancel(gctx)
	defer func() { stop(); _ = g.Wait() }()
	g.Go(func() error {
		return serveHTTP(serverCtx, ln, newHandlersWithRoom(cfg, pool, logger, nil, nil, nil, nil, wr.room, nil).Handler(), logger)
	})
	g.Go(func() error { return wr.run(serverCtx) })
	base := "http://" + ln.Addr().String()

	ev, err := catalog.New(pool).CreateEvent(ctx, catalog.EventParams{
		OrganizerID: uuid.New(), Name: "bench", StartsAt: time.Now().Add(time.Hour), Currency: "eur", Cell: cfg.Cell,
		Sections: []catalog.Section{{Name: "A", Rows: 1, SeatsPerRow: 100, PriceMinor: 1000}},
	})
	if err != nil {
		return err
	}
	// Each buyer joins, then polls; buyers are used once per second at
	// most, under the per-buyer limit.
	const nBuyers = 50_000
	tokens := make([]string, nBuyers)
	for i := range tokens {
		if tokens[i], err = auth.Mint(cfg.JWTSecret, auth.Identity{UserID: uuid.New(), Role: auth.RoleBuyer}, time.Hour); err != nil {
			return err
		}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = clients*2, clients*2
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	path := base + "/v1/events/" + ev.ID.String() + "/waiting-room"

	fmt.Printf("boxoffice bench waitingroom — Redis %s, PostgreSQL %s\n\n", cfg.RedisURL, redactURL(cfg.DatabaseURL))
	fmt.Printf("HTTP join + poll, %d clients, %s, event open at R=%.0f/s (most buyers queue)\n", clients, d, cfg.AdmissionRate)
	var (
		next     atomic.Int64
		mu       sync.Mutex
		lat      []time.Duration
		statuses = map[int]int{}
	)
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	cpu0, redis0 := processCPU(), redisCPU(ctx, wr.rdb)
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			local := make([]time.Duration, 0, 1<<16)
			st := map[int]int{}
			for time.Now().Before(deadline) && ctx.Err() == nil {
				tok := tokens[int(next.Add(1))%nBuyers]
				for _, method := range []string{http.MethodPost, http.MethodGet} {
					req, _ := http.NewRequestWithContext(ctx, method, path, nil)
					req.Header.Set("Authorization", "Bearer "+tok)
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
	elapsed := time.Since(start)
	cpu, redisUsed := processCPU()-cpu0, redisCPU(ctx, wr.rdb)-redis0
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(float64(len(lat))*p))]
	}
	fmt.Printf("  requests      %d in %s\n", len(lat), elapsed.Round(time.Millisecond))
	fmt.Printf("  requests/s    %.0f\n", float64(len(lat))/elapsed.Seconds())
	fmt.Printf("  latency       p50 %s   p99 %s   max %s\n", pct(0.5).Round(10*time.Microsecond), pct(0.99).Round(10*time.Microsecond), pct(1).Round(10*time.Microsecond))
	fmt.Printf("  statuses      %v (200 admitted, 202 queued; 0 = transport error)\n", statuses)
	fmt.Printf("  CPU           this process (server and load generator) %.1fs = %.0f%% of one core; redis-server %.1fs\n",
		cpu.Seconds(), 100*cpu.Seconds()/elapsed.Seconds(), redisUsed.Seconds())
	fmt.Printf("  requests per CPU-second, server + load generator + Redis: %.0f\n\n", float64(len(lat))/(cpu+redisUsed).Seconds())
	return nil
}

type onsaleSim struct {
	buyers, seats int
	duration      time.Duration
	holdTTL       time.Duration
	capacity      int64
}

func benchOnsale(ctx context.Context, cfg config, pool *pgxpool.Pool, logger *slog.Logger, prefix string, sim onsaleSim) error {
	wr, err := newWaitingRoom(ctx, cfg, pool, logger, nil, waitingRoomOpts{
		redisPrefix: prefix, perUser: -1,
		// No relay runs here, so the outbox only grows: the simulation's
		// capacity signal is live holds.
		thresholds: waitingroom.Thresholds{ActiveHolds: sim.capacity, OutboxAge: 24 * time.Hour},
	})
	if err != nil {
		return err
	}
	defer wr.close()
	room, ctl := wr.room, wr.room.Controller()
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
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-tick.C:
				got, err := room.AdmitEvent(gctx, ev.ID)
				if err != nil && gctx.Err() == nil {
					return err
				}
				nAdmitted.Add(int64(len(got)))
				for _, u := range got {
					admitted <- u
				}
			}
		}
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
