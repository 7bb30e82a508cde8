// Package gameday is `boxoffice-lab gameday`: a regional failover drill on
// this machine with the real engines. A primary region (a PostgreSQL
// cluster, a NATS server in its own JetStream domain, serve, relay and
// work) sells an onsale while a standby region replicates it (a hot
// standby by streaming replication, JetStream mirrors over a leafnode).
// At a moment drawn at random mid-sale the whole primary region is
// SIGKILLed; the failover is driven by the product's own commands
// (`failover promote`, the standby's roles, `smoke`, `failover resume`,
// `reconcile`), and the onsale resumes and sells out in the standby. Then
// the old primary comes back, is fenced, and is shown unable to write, and
// the run measures what the failover cost: RPO (orders and events lost, by
// id, beside the replica and stream lag at the cut), RTO (the kill to the
// first hold in the standby, and to smoke passing), oversold seats across
// both databases, and the standby's audit.
package gameday

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/boxoffice/boxoffice/client"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"boxoffice/migrations"
	"boxoffice/ops/audit"
	"boxoffice/ops/failover"
	"boxoffice/platform/auth"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
	"boxoffice/platform/pgcluster"
	"boxoffice/testkit/procs"
)

// Config is a game day's.
type Config struct {
	// Dir holds the run's clusters, stores and logs. Required.
	Dir string
	// Bin is the boxoffice-lab executable whose roles the regions run.
	// Defaults to this process's own.
	Bin string
	// Seats of the onsale's event: enough that the kill falls mid-sale.
	// Defaults to 300.
	Seats int
	// Buyers buying at once. Defaults to 6.
	Buyers int
	// KillAfter is the window after the sale starts in which the kill
	// falls, at a moment drawn at random. Defaults to 4s to 12s.
	KillMin, KillMax time.Duration
	// SaleTimeout bounds the sale after the failover. Defaults to 4m.
	SaleTimeout time.Duration
	// Seed draws the kill moment; 0 picks one.
	Seed uint64
	// Out receives progress lines. Defaults to discarding them.
	Out io.Writer
	// Logger receives the engines' messages. Defaults to discarding them.
	Logger *slog.Logger
}

// Run runs one game day and returns its result; an error means the drill
// could not be run, not that it found a problem (see Result.OK).
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	if cfg.Dir == "" {
		return nil, errors.New("gameday: Dir is required")
	}
	if cfg.Bin == "" {
		if cfg.Bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("gameday: own binary: %w", err)
		}
	}
	if cfg.Seats <= 0 {
		cfg.Seats = 300
	}
	if cfg.Buyers <= 0 {
		cfg.Buyers = 6
	}
	if cfg.KillMin <= 0 {
		cfg.KillMin = 4 * time.Second
	}
	if cfg.KillMax <= cfg.KillMin {
		cfg.KillMax = cfg.KillMin + 8*time.Second
	}
	if cfg.SaleTimeout <= 0 {
		cfg.SaleTimeout = 4 * time.Minute
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	start := time.Now()
	say := func(format string, a ...any) {
		fmt.Fprintf(cfg.Out, "%7.2fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, a...))
	}
	res = &Result{Seed: cfg.Seed, Seats: cfg.Seats, Buyers: cfg.Buyers}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed>>1|1))
	killAfter := cfg.KillMin + time.Duration(rng.Int64N(int64(cfg.KillMax-cfg.KillMin)))

	// The databases: the primary, and its hot standby.
	pgDir := func(name string) string { return filepath.Join(cfg.Dir, name) }
	// The primary is durable (fsync, synchronous commit): with Fast a
	// SIGKILL loses commits the relay has already published, which is
	// not the loss a region's failover is about.
	primaryPG, err := pgcluster.Start(ctx, pgcluster.Config{Dir: pgDir("pg-primary"), Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	defer func() { _ = primaryPG.Stop(context.WithoutCancel(ctx)) }()
	if err := migrations.Up(ctx, primaryPG.URL()); err != nil {
		return nil, err
	}
	standbyPG, err := pgcluster.StartStandby(ctx, primaryPG, pgcluster.Config{Dir: pgDir("pg-standby"), Fast: true, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	defer func() { _ = standbyPG.Stop(context.WithoutCancel(ctx)) }()
	say("PostgreSQL: primary on :%d, hot standby on :%d (pg_basebackup -R)", primaryPG.Port(), standbyPG.Port())

	// The buses: two JetStream domains, the standby mirroring over a leafnode.
	baseEnv := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	primary := &region{name: "primary", dir: cfg.Dir, bin: cfg.Bin}
	standby := &region{name: "standby", dir: cfg.Dir, bin: cfg.Bin}
	defer primary.close()
	defer standby.close()
	leafPort, err := procs.FreePort()
	if err != nil {
		return nil, err
	}
	if err := primary.startNATS(ctx, baseEnv, leafPort, ""); err != nil {
		return nil, err
	}
	if err := standby.startNATS(ctx, baseEnv, 0, fmt.Sprintf("nats-leaf://127.0.0.1:%d", leafPort)); err != nil {
		return nil, err
	}
	pnc, pjs, err := bus.Connect(primary.natsURL, "gameday", cfg.Logger)
	if err != nil {
		return nil, err
	}
	defer pnc.Close()
	snc, sjs, err := bus.Connect(standby.natsURL, "gameday", cfg.Logger)
	if err != nil {
		return nil, err
	}
	defer snc.Close()
	if err := bus.Provision(ctx, pjs, bus.Config{}); err != nil {
		return nil, err
	}
	if err := bus.ProvisionStandby(ctx, sjs, bus.Config{}, "primary"); err != nil {
		return nil, err
	}
	say("NATS: primary %s (domain primary), standby %s (domain standby) mirroring TICKETING and TICKETING_DLQ", primary.natsURL, standby.natsURL)

	// The primary's roles, on epoch 1.
	sec := newSecrets()
	pAPIPort, err := freePortString()
	if err != nil {
		return nil, err
	}
	const holdTTL = time.Minute
	if err := primary.startRoles(ctx, sec.roleEnv(baseEnv, primaryPG.URL(), primary.natsURL, pAPIPort, 1, holdTTL), pAPIPort); err != nil {
		return nil, err
	}
	say("primary roles up (serve, relay, work) on epoch 1; API %s", primary.api)

	event, err := createEvent(ctx, primary.api, []byte(sec.jwt), cfg.Seats)
	if err != nil {
		return nil, err
	}
	res.EventID = event.String()
	s := &sale{event: event, jwtSecret: []byte(sec.jwt)}
	s.api.Store(&primary.api)
	saleCtx, stopSale := context.WithTimeout(ctx, killAfter+cfg.SaleTimeout)
	defer stopSale()
	saleDone := make(chan struct{})
	saleStart := time.Now()
	go func() { s.run(saleCtx, cfg.Buyers); close(saleDone) }()
	say("onsale of %d seats started, %d buyers; the kill falls %.1fs in (seed %d)", cfg.Seats, cfg.Buyers, killAfter.Seconds(), cfg.Seed)

	// The cut.
	if err := sleep(ctx, time.Until(saleStart.Add(killAfter))); err != nil {
		return nil, err
	}
	primaryPool, err := db.NewPool(ctx, db.PoolConfig{URL: primaryPG.URL(), MaxConns: 2})
	if err != nil {
		return nil, err
	}
	standbyPool, err := db.NewPool(ctx, db.PoolConfig{URL: standbyPG.URL(), MaxConns: 4})
	if err != nil {
		return nil, err
	}
	defer standbyPool.Close()
	cut, err := failover.Measure(ctx, failover.Sources{Standby: standbyPool, StandbyJS: sjs, Primary: primaryPool, PrimaryJS: pjs})
	primaryPool.Close()
	if err != nil {
		return nil, fmt.Errorf("measure at the cut: %w", err)
	}
	killAt := time.Now()
	primary.killAll()
	if err := primaryPG.Kill(ctx); err != nil {
		return nil, err
	}
	res.KillAfterSeconds = killAt.Sub(saleStart).Seconds()
	res.AtCut = cut
	res.HoldsBeforeKill = s.holdsByRegion[0].Load()
	say("SIGKILL of the primary region (PostgreSQL, NATS, serve, relay, work); at the cut: replay lag %s bytes, stream copy lag %d events, %d outbox rows unpublished",
		ptrString(cut.ReplayLagBytes), cut.StreamLag, cut.OutboxUnpublished)

	// The failover, by the product's commands.
	standbyEnv := func(extra ...string) []string {
		return append(sec.roleEnv(baseEnv, standbyPG.URL(), standby.natsURL, "0", 2, holdTTL), extra...)
	}
	out, err := runCmd(ctx, cfg.Bin, standbyEnv("BOXOFFICE_PRIMARY_DATABASE_URL="+primaryPG.URL(), "BOXOFFICE_PRIMARY_NATS_URL="+primary.natsURL), "failover", "promote", "-epoch", "2")
	res.Promote = out
	if err != nil {
		return res, fmt.Errorf("failover promote: %w\n%s", err, out)
	}
	res.PromotedAfterSeconds = time.Since(killAt).Seconds()
	say("failover promote -epoch 2: done (database and streams promoted, fenced, onsales paused)")
	sAPIPort, err := freePortString()
	if err != nil {
		return nil, err
	}
	if err := standby.startRoles(ctx, sec.roleEnv(baseEnv, standbyPG.URL(), standby.natsURL, sAPIPort, 2, holdTTL), sAPIPort); err != nil {
		return res, err
	}
	res.RolesUpAfterSeconds = time.Since(killAt).Seconds()
	say("standby roles up on epoch 2; API %s", standby.api)
	s.standby.Store(true)
	s.api.Store(&standby.api)
	out, err = runCmd(ctx, cfg.Bin, standbyEnv(), "smoke", "-api", standby.api)
	res.Smoke = out
	if err != nil {
		return res, fmt.Errorf("smoke: %w\n%s", err, out)
	}
	res.RTOSmokeSeconds = time.Since(killAt).Seconds()
	say("smoke passed %.1fs after the kill", res.RTOSmokeSeconds)
	if out, err = runCmd(ctx, cfg.Bin, standbyEnv(), "failover", "resume", "-epoch", "2"); err != nil {
		return res, fmt.Errorf("failover resume: %w\n%s", err, out)
	}
	say("failover resume: %s", strings.TrimSpace(out))

	<-saleDone
	s.mu.Lock()
	if !s.firstStandbyAt.IsZero() {
		res.RTOFirstHoldSeconds = s.firstStandbyAt.Sub(killAt).Seconds()
	}
	res.Orders = s.orders
	s.mu.Unlock()
	res.SoldOut = s.soldOut.Load()
	res.HoldsAfterFailover = s.holdsByRegion[1].Load()
	say("sale over: no seat left to buy %v; holds %d before the kill, %d after; first hold in the standby %.1fs after the kill",
		res.SoldOut, res.HoldsBeforeKill, res.HoldsAfterFailover, res.RTOFirstHoldSeconds)

	// Reconcile around the cutover, then let the standby settle.
	if out, err = runCmd(ctx, cfg.Bin, standbyEnv(), "reconcile", "-since", "1h"); err != nil {
		return res, fmt.Errorf("reconcile: %w\n%s", err, out)
	}
	res.Reconcile = out
	settleErr := settle(ctx, standbyPool, sjs, holdTTL+30*time.Second)
	say("reconciled; the standby settled: %v", errOr(settleErr, "consumers drained, outbox empty, every order ended"))

	// The old primary comes back on its old epoch.
	oldPG, err := pgcluster.Start(ctx, pgcluster.Config{Dir: pgDir("pg-primary"), Logger: cfg.Logger})
	if err != nil {
		return res, fmt.Errorf("restart the old primary: %w", err)
	}
	defer func() { _ = oldPG.Stop(context.WithoutCancel(ctx)) }()
	for _, p := range primary.procs[:1] { // its NATS node, to read what its stream held
		if err := p.Start(); err != nil {
			return res, err
		}
	}
	oldPool, err := db.NewPool(ctx, db.PoolConfig{URL: oldPG.URL(), MaxConns: 2})
	if err != nil {
		return res, err
	}
	defer oldPool.Close()
	if err := measureLoss(ctx, res, oldPool, standbyPool, primary.natsURL, sjs, cfg.Logger); err != nil {
		return res, err
	}
	say("RPO: %d committed orders lost, %d events lost (%d of them had reached the standby's stream); %d events crossed for orders that did not",
		len(res.LostOrders), len(res.LostEvents), len(res.LostCrossedEvents), len(res.OrphanEvents))
	switch {
	case settleErr != nil && len(res.OrphanEvents) > 0:
		// The consumers retry, then dead-letter, the events of orders
		// the standby never had; that is the orders' loss, counted above.
		res.Notes = append(res.Notes, settleErr.Error()+" (the consumers retry the events of orders lost in the replica lag until they dead-letter them)")
	case settleErr != nil:
		res.Problems = append(res.Problems, settleErr.Error())
	}
	if err := checkFence(ctx, res, cfg.Bin, baseEnv, oldPG.URL(), standbyPG.URL()); err != nil {
		return res, err
	}
	say("old primary back on epoch 1: %s", res.OldPrimaryWrite)
	if err := standbyPool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE t.id IS NULL),
		       count(*) FILTER (WHERE t.id IS NULL AND EXISTS (SELECT 1 FROM hold_seats hs WHERE hs.seat_id = s.id AND hs.released_at IS NULL))
		FROM seats s LEFT JOIN tickets t ON t.seat_id = s.id WHERE s.event_id = $1`, event).Scan(&res.Unsold, &res.UnsoldHeld); err != nil {
		return res, fmt.Errorf("count unsold seats: %w", err)
	}
	if err := oversold(ctx, res, oldPool, standbyPool); err != nil {
		return res, err
	}
	r, err := audit.Run(ctx, standbyPool, sjs, audit.Thresholds{})
	if err != nil {
		return res, fmt.Errorf("audit: %w", err)
	}
	var ab strings.Builder
	_ = r.Write(&ab)
	res.Audit, res.AuditOK = ab.String(), r.OK()
	say("oversold %d; audit passed %v", res.Oversold, res.AuditOK)
	return res, nil
}

func freePortString() (string, error) {
	p, err := procs.FreePort()
	return fmt.Sprint(p), err
}

func ptrString(p *int64) string {
	if p == nil {
		return "?"
	}
	return fmt.Sprint(*p)
}

// runCmd runs one of the product's commands as an operator would, and
// returns its output.
func runCmd(ctx context.Context, bin string, env []string, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// createEvent creates the onsale's event through the API.
func createEvent(ctx context.Context, base string, secret []byte, seats int) (uuid.UUID, error) {
	api, err := client.NewClientWithResponses(base)
	if err != nil {
		return uuid.Nil, err
	}
	tok, err := auth.Mint(secret, auth.Identity{UserID: uuid.New(), Role: auth.RoleOrganizer, OrganizerID: uuid.New()}, time.Hour)
	if err != nil {
		return uuid.Nil, err
	}
	per := min(seats, 25)
	sections := []client.SectionInput{{Name: "Stalls", Rows: int64(seats / per), SeatsPerRow: int64(per), PriceMinor: 5000}}
	if rest := seats % per; rest > 0 {
		sections = append(sections, client.SectionInput{Name: "Balcony", Rows: 1, SeatsPerRow: int64(rest), PriceMinor: 3000})
	}
	ev, err := api.CreateEventWithResponse(ctx, nil, client.CreateEventJSONRequestBody{
		Name: "Game day " + time.Now().UTC().Format(time.DateTime), StartsAt: time.Now().Add(30 * 24 * time.Hour), Currency: "eur", Sections: sections,
	}, client.WithBearer(tok))
	if err != nil {
		return uuid.Nil, fmt.Errorf("create event: %w", err)
	}
	if ev.JSON201 == nil {
		return uuid.Nil, fmt.Errorf("create event: status %d", ev.StatusCode())
	}
	return uuid.Parse(ev.JSON201.ID)
}

// settle waits until every consumer of the standby's stream has applied
// every message (nothing pending, nothing awaiting an ack), the outbox is
// empty and every order has ended.
func settle(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		busy, err := backlog(ctx, pool, js)
		if err == nil && busy == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the standby did not settle within %s: %s %v", timeout, busy, err)
		}
		if err := sleep(ctx, 250*time.Millisecond); err != nil {
			return err
		}
	}
}

// backlog says what the standby still has to do, "" for nothing.
func backlog(ctx context.Context, pool *pgxpool.Pool, js jetstream.JetStream) (string, error) {
	var outbox int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM outbox").Scan(&outbox); err != nil {
		return "", err
	}
	if outbox > 0 {
		return fmt.Sprintf("%d outbox rows", outbox), nil
	}
	// Orders the failover left in between end by themselves: an unpaid
	// hold expires (BOXOFFICE_HOLD_TTL), a paid one is captured and
	// ticketed, or refunded.
	var open int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM orders WHERE status NOT IN ('ticketed', 'failed', 'canceled', 'refunded')").Scan(&open); err != nil {
		return "", err
	}
	if open > 0 {
		return fmt.Sprintf("%d orders not final", open), nil
	}
	s, err := js.Stream(ctx, bus.Stream)
	if err != nil {
		return "", err
	}
	lister := s.ListConsumers(ctx)
	for c := range lister.Info() {
		if c.NumPending > 0 || c.NumAckPending > 0 {
			return fmt.Sprintf("consumer %s: %d pending, %d awaiting ack", c.Name, c.NumPending, c.NumAckPending), nil
		}
	}
	return "", lister.Err()
}

func errOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}
