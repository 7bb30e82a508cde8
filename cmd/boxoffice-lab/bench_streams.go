package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"boxoffice/cmd/boxoffice/roles"
	"boxoffice/domain/catalog"
	"boxoffice/domain/purchase"
	"boxoffice/lab/bench"
	"boxoffice/platform/auth"
	"boxoffice/platform/db"
	"boxoffice/platform/outbox"
	"boxoffice/relay"
	"boxoffice/sqlcgen"
)

// Goals of the order event streams (issue 15): what 10,000 idle streams
// may cost one API process, and the time from a status change's commit to
// its event on the stream.
const (
	streamsIdleCPUGoal = 5.0 // % of one core
	streamsLatencyGoal = 100 * time.Millisecond
)

// runBenchStreams measures the order event streams of one API process,
// run as a child process (`boxoffice serve`) so that its CPU is its own:
// the idle cost of -streams open streams, and the time from a status
// change's commit (outbox row, relay, JetStream, order feed, stream) to
// its arrival on the client. The database, NATS (embedded), the relay and
// the clients run in this process.
func runBenchStreams(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bench streams", flag.ExitOnError)
	n := fs.Int("streams", 10000, "order event streams open at once on the API process")
	// A minute covers one safety read of every stream (they read their
	// order once a minute when nothing woke them) and four heartbeats.
	quiet := fs.Duration("quiet", time.Minute, "length of each idle window (without streams, then with them)")
	changes := fs.Int("changes", 500, "status changes timed from commit to stream")
	rate := fs.Float64("change-rate", 50, "status changes (and non-status events) per second")
	events := fs.Int("events", 500, "order events that change nothing a stream shows, committed for open streams' orders")
	apiBinary := fs.String("api-binary", "", "boxoffice binary to run the API with (default: this one)")
	_ = fs.Parse(args)
	if *apiBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		*apiBinary = exe
	}
	// Each stream is a connection, hence a descriptor, in this process and
	// in the API's (which inherits the limit).
	nofile, err := raiseOpenFiles(uint64(*n) + 1024)
	if err != nil {
		return err
	}

	cfg, pool, cleanup, err := benchSetup(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	// The API is a `boxoffice serve`, which refuses dev's public JWT
	// secret: the buyers' tokens are minted with one of this run's.
	cfg.JWTSecret = []byte(randomHex(32))
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nc, _, stopBus, err := benchBus(ctx, &cfg, logger)
	if err != nil {
		return err
	}
	defer stopBus()
	r, err := relay.New(pool, nc, relay.Config{Logger: logger})
	if err != nil {
		return err
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(relayCtx) }()
	defer func() { stopRelay(); <-relayDone }() //nolint:errcheck // the relay's error is its shutdown's, past the measurement

	fmt.Printf("boxoffice-lab bench streams — %d order event streams on one API process (a child `boxoffice serve`), RLIMIT_NOFILE %d\n\n", *n, nofile)
	orders, err := streamOrders(ctx, cfg, pool, logger, *n)
	if err != nil {
		return err
	}

	// The API reaches the database through a proxy that counts its
	// transactions.
	pc := pool.Config().ConnConfig
	txc, err := bench.NewTxCounter(net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))))
	if err != nil {
		return err
	}
	defer txc.Close()
	apiDB, err := url.Parse(pool.Config().ConnString())
	if err != nil || apiDB.Scheme == "" {
		return fmt.Errorf("bench streams needs DATABASE_URL as a postgres:// URL: %v", err)
	}
	apiDB.Host = txc.Addr()
	q := apiDB.Query()
	q.Set("sslmode", "disable")
	apiDB.RawQuery = q.Encode()
	api, err := startAPI(ctx, *apiBinary, cfg, apiDB.String())
	if err != nil {
		return err
	}
	defer api.stop()
	fmt.Printf("API process %d (%s serve), listening on %s\n\n", api.cmd.Process.Pid, *apiBinary, api.url)

	res, err := bench.RunStreams(ctx, bench.StreamsRun{
		BaseURL: api.url, PID: api.cmd.Process.Pid, Orders: orders, Quiet: *quiet,
		Changes: *changes, ChangeRate: *rate,
		Events: *events, EventFunc: quietEvent(pool),
		ChangeFunc:       cancelWithEvent(pool),
		TransactionsFunc: txc.Transactions,
	})
	if err != nil {
		return err
	}
	mb := func(b int64) float64 { return float64(b) / (1 << 20) }
	fmt.Printf("%-52s %12s %12s\n", "", "measured", "goal")
	fmt.Printf("%-52s %12s\n", fmt.Sprintf("open %d streams", res.Streams), res.OpenTime.Round(time.Millisecond))
	fmt.Printf("%-52s %11.2f%% %12s\n", fmt.Sprintf("API CPU, no stream open (%s)", res.Baseline.Window.Round(time.Second)), res.Baseline.CPUPercent, "")
	fmt.Printf("%-52s %11.2f%% %11.1f%%\n", fmt.Sprintf("API CPU, %d streams open (%s)", res.Streams, res.Open.Window.Round(time.Second)), res.Open.CPUPercent, streamsIdleCPUGoal)
	fmt.Printf("%-52s %12.1f\n", "API database tx/s, no stream open", res.Baseline.TxPerSec)
	fmt.Printf("%-52s %12.1f\n", fmt.Sprintf("API database tx/s, %d streams open", res.Streams), res.Open.TxPerSec)
	fmt.Printf("%-52s %12.2f\n", fmt.Sprintf("API database tx per non-status event (%d events)", res.Events), res.EventTxPerEvent)
	fmt.Printf("%-52s %9.0f MB %12s\n", "API resident memory, no stream open", mb(res.Baseline.RSSBytes), "")
	fmt.Printf("%-52s %9.0f MB %12s\n", fmt.Sprintf("API resident memory, %d streams open", res.Streams), mb(res.Open.RSSBytes), "")
	fmt.Printf("%-52s %12s %12s\n", fmt.Sprintf("change → stream p50 (%d of %d arrived, %.0f/s)", res.Arrived, res.Changed, *rate), res.P50.Round(100*time.Microsecond), "")
	fmt.Printf("%-52s %12s %12s\n", "change → stream p99", res.P99.Round(100*time.Microsecond), streamsLatencyGoal)
	fmt.Printf("%-52s %12s\n", "change → stream max", res.Max.Round(100*time.Microsecond))
	return nil
}

// raiseOpenFiles raises this process's soft RLIMIT_NOFILE to want, or to
// the hard limit if that is lower, and returns the soft limit now.
func raiseOpenFiles(want uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("read RLIMIT_NOFILE: %w", err)
	}
	if lim.Cur >= want {
		return lim.Cur, nil
	}
	lim.Cur = min(want, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", lim.Cur, err)
	}
	return lim.Cur, nil
}

// streamOrders creates an event of n seats and n orders awaiting payment
// on it through the hold path, each of its own buyer (the API caps the
// streams of one buyer), with a bearer token of that buyer.
func streamOrders(ctx context.Context, cfg roles.Config, pool *pgxpool.Pool, logger *slog.Logger, n int) ([]bench.StreamOrder, error) {
	start := time.Now()
	const perRow = 500
	cat := catalog.New(pool)
	ev, err := cat.CreateEvent(ctx, catalog.EventParams{
		OrganizerID: uuid.New(), Name: "Bench streams", StartsAt: time.Now().Add(24 * time.Hour), Currency: "eur", Cell: cfg.Cell,
		Sections: []catalog.Section{{Name: "Floor", Rows: (n + perRow - 1) / perRow, SeatsPerRow: perRow, PriceMinor: 5000}},
	})
	if err != nil {
		return nil, fmt.Errorf("create event: %w", err)
	}
	seats, err := cat.Seats(ctx, ev.ID)
	if err != nil {
		return nil, fmt.Errorf("list seats: %w", err)
	}
	// No expiry worker runs: the holds outlive the benchmark anyway.
	svc := purchase.NewService(pool, logger, purchase.Config{HoldTTL: time.Hour})
	orders := make([]bench.StreamOrder, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			user := uuid.New()
			h, err := svc.Hold(gctx, purchase.HoldParams{
				UserID: user, EventID: ev.ID, SeatIDs: []uuid.UUID{seats[i].ID}, IdempotencyKey: uuid.NewString(),
			})
			if err != nil {
				return fmt.Errorf("hold seat %d: %w", i, err)
			}
			tok, err := auth.Mint(cfg.JWTSecret, auth.Identity{UserID: user, Role: auth.RoleBuyer}, 2*time.Hour)
			if err != nil {
				return err
			}
			orders[i] = bench.StreamOrder{ID: h.OrderID, Bearer: tok}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	fmt.Printf("%d orders awaiting payment created through the hold path in %s\n", n, time.Since(start).Round(time.Millisecond))
	return orders, nil
}

// cancelWithEvent returns a change that commits what a buyer's cancel
// commits of the order itself, pending_payment → canceled with
// OrderCanceled, in one transaction (the seats stay held: a stream does not
// show them). It returns once the commit did.
func cancelWithEvent(pool *pgxpool.Pool) func(context.Context, uuid.UUID) error {
	return func(ctx context.Context, order uuid.UUID) error {
		return db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
			// An order not awaiting payment fails the statement.
			if err := sqlcgen.New().OrderTransition(ctx, tx, sqlcgen.OrderTransitionParams{
				ID: order, FromStatus: "pending_payment", ToStatus: "canceled",
			}); err != nil {
				return fmt.Errorf("cancel order: %w", err)
			}
			env, raw, err := outbox.NewOrderEvent(outbox.TypeOrderCanceled, order, time.Now(), "", "",
				outbox.OrderCanceled{OrderID: order, Reason: "bench"})
			if err != nil {
				return err
			}
			return outbox.Insert(ctx, tx, env, raw)
		})
	}
}

// quietEvent returns what commits, in turn, one of the events of a
// purchase that change nothing a stream shows, as their writers do but
// alone (the payments worker's command, the provider's facts); no
// consumer runs, so none acts on them.
func quietEvent(pool *pgxpool.Pool) func(context.Context, uuid.UUID, int) error {
	types := []string{
		outbox.TypePaymentAuthorizationRequested, outbox.TypePaymentAuthorized,
		outbox.TypeCaptureRequested, outbox.TypePaymentCaptured,
	}
	return func(ctx context.Context, order uuid.UUID, i int) error {
		return db.WithTx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
			env, raw, err := outbox.NewOrderEvent(types[i%len(types)], order, time.Now(), "", "",
				map[string]any{"order_id": order})
			if err != nil {
				return err
			}
			return outbox.Insert(ctx, tx, env, raw)
		})
	}
}

// childAPI is the API under test, a `boxoffice serve` of its own.
type childAPI struct {
	child
	url string
}

// startAPI runs binary serve on the bench database and bus, logging
// warnings only, and waits until it is ready with its order feed following
// the bus.
func startAPI(ctx context.Context, binary string, cfg roles.Config, databaseURL string) (*childAPI, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	ops, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, "serve")
	// serve refuses dev's public secrets: the child gets secrets of its
	// own (the bearer tokens are minted with cfg.JWTSecret, which
	// runBenchStreams made one), and the sandbox by name.
	env := []string{
		"DATABASE_URL=" + databaseURL, "NATS_URL=" + cfg.NATSURL,
		"BOXOFFICE_JWT_SECRET=" + string(cfg.JWTSecret), "BOXOFFICE_ADMISSION_KEY=" + randomHex(32),
		"BOXOFFICE_PAYMENTS=sandbox", "STRIPE_WEBHOOK_SECRET=whsec_" + randomHex(24),
		"BOXOFFICE_WEBHOOK_SECRET_KEYS=bench:" + base64.StdEncoding.EncodeToString([]byte(randomHex(16))),
		"HTTP_ADDR=" + addr, "OPS_ADDR=" + ops, "BOXOFFICE_LOG_LEVEL=warn",
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PATH", "HOME", "TMPDIR", "GOMAXPROCS", "GOGC", "GOMEMLIMIT", "GODEBUG":
			env = append(env, kv)
		}
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s serve: %w", binary, err)
	}
	api := &childAPI{child: newChild(cmd), url: "http://" + addr}
	api.wait()
	// Ready: /readyz answers 200 (database and NATS), and a second more
	// for the order feed's consumer, which it checks every second.
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(api.url + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-api.done:
			return nil, fmt.Errorf("api exited: %v", api.err)
		case <-ctx.Done():
			api.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			api.stop()
			return nil, errors.New("api not ready within 30s")
		}
	}
	select {
	case <-ctx.Done():
		api.stop()
		return nil, ctx.Err()
	case <-time.After(2 * time.Second):
	}
	return api, nil
}

// stop asks the API to shut down and waits for it, killing it after 15 s.
func (a *childAPI) stop() {
	a.end(syscall.SIGTERM, 15*time.Second)
}

// freeAddr is a loopback address with a port free now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
