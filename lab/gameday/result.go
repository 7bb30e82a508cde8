package gameday

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"boxoffice/ops/failover"
	"boxoffice/platform/bus"
	"boxoffice/platform/db"
)

// Result is what a game day measured.
type Result struct {
	Seed    uint64 `json:"seed"`
	Seats   int    `json:"seats"`
	Buyers  int    `json:"buyers"`
	EventID string `json:"event_id"`

	// KillAfterSeconds is when the kill fell, after the sale started.
	KillAfterSeconds float64 `json:"kill_after_seconds"`
	// AtCut is the recovery point measured just before the kill, with
	// the primary still answering: the replica's and the stream copy's
	// lag at the cut.
	AtCut failover.RecoveryPoint `json:"at_cut"`

	// RPO: committed orders the standby never received, and events on the
	// primary's stream missing from the standby's; LostCrossedEvents are
	// those of them that had reached the standby's copy (must be none).
	LostOrders        []LostOrder `json:"lost_orders"`
	LostEvents        []string    `json:"lost_events"`
	LostCrossedEvents []string    `json:"lost_crossed_events"`
	// OrphanEvents crossed on the stream, but their order did not cross
	// in the database (it was in the replica's lag): the standby's
	// consumers cannot apply them and dead-letter them.
	OrphanEvents []string `json:"orphan_events"`
	// InBetween are the orders the primary left unfinished, and how each
	// ended in the standby.
	InBetween []OrderFate `json:"in_between"`

	// RTO, from the kill.
	PromotedAfterSeconds float64 `json:"promoted_after_seconds"`
	RolesUpAfterSeconds  float64 `json:"roles_up_after_seconds"`
	RTOSmokeSeconds      float64 `json:"rto_smoke_seconds"`
	RTOFirstHoldSeconds  float64 `json:"rto_first_hold_seconds"`

	HoldsBeforeKill    int64 `json:"holds_before_kill"`
	HoldsAfterFailover int64 `json:"holds_after_failover"`
	// SoldOut is true when the sale ended with no seat left to buy:
	// every seat ticketed, or held by an order still in between.
	SoldOut bool `json:"sold_out"`
	// Unsold seats at the end, and how many of them an order still held.
	Unsold         int         `json:"unsold"`
	UnsoldHeld     int         `json:"unsold_held"`
	Orders         []heldOrder `json:"-"`
	TicketsPrimary int         `json:"tickets_primary"`
	TicketsStandby int         `json:"tickets_standby"`
	// Oversold counts seats with two different tickets, across both
	// databases (the fenced primary's rows too).
	Oversold      int      `json:"oversold"`
	OversoldSeats []string `json:"oversold_seats"`
	AuditOK       bool     `json:"audit_ok"`
	// OldPrimaryWrite says what a process on the old epoch got when it
	// wrote, to either database, once the old primary was back.
	OldPrimaryWrite  string   `json:"old_primary_write"`
	OldPrimaryFenced bool     `json:"old_primary_fenced"`
	Problems         []string `json:"problems"`
	Notes            []string `json:"notes"`

	Promote   string `json:"promote_output"`
	Smoke     string `json:"smoke_output"`
	Reconcile string `json:"reconcile_output"`
	Audit     string `json:"audit"`
}

// LostOrder is an order the old primary committed that the standby lacks.
type LostOrder struct {
	ID        string    `json:"id"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
}

// OrderFate is an order the primary left unfinished.
type OrderFate struct {
	ID            string `json:"id"`
	PrimaryStatus string `json:"primary_status"`
	// StandbyStatus is its status in the standby at the end, "lost" when
	// the standby never had it.
	StandbyStatus string `json:"standby_status"`
}

// OK reports whether the failover kept its promises: no event that had
// reached the standby lost, no seat sold twice, the audit passed, and the
// old epoch could write nowhere.
func (r *Result) OK() bool {
	return len(r.LostCrossedEvents) == 0 && r.Oversold == 0 && r.AuditOK && r.OldPrimaryFenced && len(r.Problems) == 0
}

// measureLoss compares what the old primary holds with the standby.
func measureLoss(ctx context.Context, res *Result, oldPool, standbyPool *pgxpool.Pool, oldNATS string, sjs jetstream.JetStream, logger *slog.Logger) error {
	type row struct {
		status string
		at     time.Time
	}
	read := func(pool *pgxpool.Pool) (map[string]row, error) {
		rows, err := pool.Query(ctx, "SELECT id::text, status, created_at FROM orders")
		if err != nil {
			return nil, fmt.Errorf("read orders: %w", err)
		}
		defer rows.Close()
		m := map[string]row{}
		for rows.Next() {
			var id string
			var r row
			if err := rows.Scan(&id, &r.status, &r.at); err != nil {
				return nil, err
			}
			m[id] = r
		}
		return m, rows.Err()
	}
	old, err := read(oldPool)
	if err != nil {
		return err
	}
	now, err := read(standbyPool)
	if err != nil {
		return err
	}
	final := map[string]bool{"ticketed": true, "failed": true, "canceled": true, "refunded": true}
	for id, o := range old {
		n, ok := now[id]
		if !ok {
			res.LostOrders = append(res.LostOrders, LostOrder{ID: id, Status: o.status, CreatedAt: o.at})
		}
		if !final[o.status] {
			f := OrderFate{ID: id, PrimaryStatus: o.status, StandbyStatus: "lost"}
			if ok {
				f.StandbyStatus = n.status
			}
			res.InBetween = append(res.InBetween, f)
		}
	}
	sort.Slice(res.LostOrders, func(i, j int) bool { return res.LostOrders[i].CreatedAt.Before(res.LostOrders[j].CreatedAt) })
	sort.Slice(res.InBetween, func(i, j int) bool { return res.InBetween[i].ID < res.InBetween[j].ID })

	_, pjs, err := bus.Connect(oldNATS, "gameday-old", logger)
	if err != nil {
		return err
	}
	oldIDs, err := msgIDs(ctx, pjs)
	if err != nil {
		return fmt.Errorf("old primary's stream: %w", err)
	}
	newIDs, err := msgIDs(ctx, sjs)
	if err != nil {
		return fmt.Errorf("standby's stream: %w", err)
	}
	have := map[string]bool{}
	for _, m := range newIDs {
		have[m.id] = true
		if id, ok := strings.CutPrefix(m.aggregate, "order/"); ok {
			if _, known := now[id]; !known {
				res.OrphanEvents = append(res.OrphanEvents, m.id)
			}
		}
	}
	crossed := uint64(0)
	if len(res.AtCut.Streams) > 0 {
		crossed = res.AtCut.Streams[0].LastSeq
	}
	for _, m := range oldIDs {
		if have[m.id] {
			continue
		}
		res.LostEvents = append(res.LostEvents, m.id)
		if m.seq <= crossed {
			res.LostCrossedEvents = append(res.LostCrossedEvents, m.id)
		}
	}
	return nil
}

type streamMsg struct {
	seq       uint64
	id        string
	aggregate string // "order/<id>"
}

// msgIDs reads every message's Nats-Msg-Id of the default event stream.
func msgIDs(ctx context.Context, js jetstream.JetStream) ([]streamMsg, error) {
	var s jetstream.Stream
	var err error
	for range 100 { // the old primary's server is starting again
		if s, err = js.Stream(ctx, bus.Stream); err == nil {
			break
		}
		_ = sleep(ctx, 100*time.Millisecond)
	}
	if err != nil {
		return nil, err
	}
	last := s.CachedInfo().State.LastSeq
	var out []streamMsg
	for seq := s.CachedInfo().State.FirstSeq; seq <= last && seq > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // a deleted sequence
		}
		var env struct {
			AggregateType string `json:"aggregate_type"`
			AggregateID   string `json:"aggregate_id"`
		}
		_ = json.Unmarshal(m.Data, &env)
		out = append(out, streamMsg{seq: seq, id: m.Header.Get(jetstream.MsgIDHeader), aggregate: env.AggregateType + "/" + env.AggregateID})
	}
	return out, nil
}

// checkFence shows the old epoch cannot write: to the promoted database
// (as a process of the old region would through a stale address), and,
// once `failover stop` has fenced it, to the old primary's database.
func checkFence(ctx context.Context, res *Result, bin string, env []string, oldURL, standbyURL string) error {
	write := func(url string) error {
		pool, err := db.NewPool(ctx, db.PoolConfig{URL: url, MaxConns: 1, RegionEpoch: 1})
		if err != nil {
			return err
		}
		defer pool.Close()
		_, err = pool.Exec(ctx, "UPDATE onsales SET paused = paused WHERE false")
		return err
	}
	errStandby := write(standbyURL)
	out, err := runCmd(ctx, bin, append(env, "DATABASE_URL="+oldURL), "failover", "stop", "-epoch", "2")
	if err != nil {
		return fmt.Errorf("failover stop on the old primary: %w\n%s", err, out)
	}
	errOld := write(oldURL)
	res.OldPrimaryFenced = db.IsFenced(errStandby) && db.IsFenced(errOld)
	res.OldPrimaryWrite = fmt.Sprintf("to the promoted database: %v; to the old database after `failover stop -epoch 2`: %v", errStandby, errOld)
	return nil
}

// oversold counts the seats with two different tickets across both
// databases.
func oversold(ctx context.Context, res *Result, oldPool, standbyPool *pgxpool.Pool) error {
	tickets := map[string]map[string]bool{}
	for i, pool := range []*pgxpool.Pool{oldPool, standbyPool} {
		rows, err := pool.Query(ctx, "SELECT seat_id::text, id::text FROM tickets")
		if err != nil {
			return fmt.Errorf("read tickets: %w", err)
		}
		n := 0
		for rows.Next() {
			var seat, id string
			if err := rows.Scan(&seat, &id); err != nil {
				rows.Close()
				return err
			}
			if tickets[seat] == nil {
				tickets[seat] = map[string]bool{}
			}
			tickets[seat][id] = true
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if i == 0 {
			res.TicketsPrimary = n
		} else {
			res.TicketsStandby = n
		}
	}
	for seat, ids := range tickets {
		if len(ids) > 1 {
			res.Oversold++
			res.OversoldSeats = append(res.OversoldSeats, seat)
		}
	}
	return nil
}

// WriteText writes the report for people.
func (r *Result) WriteText(w io.Writer) error {
	pf := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	verdict := "PASSED"
	if !r.OK() {
		verdict = "FAILED"
	}
	pf("Game day %s (seed %d): %d seats, %d buyers, kill %.1fs into the sale\n\n", verdict, r.Seed, r.Seats, r.Buyers, r.KillAfterSeconds)
	pf("At the cut (measured just before the SIGKILL):\n")
	pf("  replica replay lag: %s bytes; last replayed commit %s\n", ptrString(r.AtCut.ReplayLagBytes), timeOr(r.AtCut.LastReplayedCommitAt))
	pf("  stream copy lag:    %d events (primary last seq %s, copy %d)\n", r.AtCut.StreamLag, seqOr(r.AtCut.PrimaryLastSeq), lastSeq(r.AtCut))
	pf("  outbox unpublished: %d rows\n\n", r.AtCut.OutboxUnpublished)
	pf("RPO\n  committed orders lost: %d\n", len(r.LostOrders))
	for _, o := range r.LostOrders {
		pf("    %s  %s  committed %s\n", o.ID, o.Status, o.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
	pf("  events lost: %d (of them had reached the standby's stream: %d)\n", len(r.LostEvents), len(r.LostCrossedEvents))
	for _, id := range r.LostEvents {
		pf("    %s\n", id)
	}
	pf("  events that crossed for an order that did not (the order was in the replica lag): %d\n", len(r.OrphanEvents))
	for _, id := range r.OrphanEvents {
		pf("    %s\n", id)
	}
	pf("  orders left in between: %d\n", len(r.InBetween))
	for _, o := range r.InBetween {
		pf("    %s  %s on the primary -> %s in the standby\n", o.ID, o.PrimaryStatus, o.StandbyStatus)
	}
	pf("\nRTO (from the kill)\n  promoted:            %6.1fs\n  standby roles ready: %6.1fs\n  smoke passed:        %6.1fs\n  first hold:          %6.1fs\n\n",
		r.PromotedAfterSeconds, r.RolesUpAfterSeconds, r.RTOSmokeSeconds, r.RTOFirstHoldSeconds)
	pf("Sale: holds %d before the kill, %d after; no seat left to buy %v; unsold %d (%d of them held by an order in between); tickets %d in the old primary, %d in the standby (smoke's own included)\n",
		r.HoldsBeforeKill, r.HoldsAfterFailover, r.SoldOut, r.Unsold, r.UnsoldHeld, r.TicketsPrimary, r.TicketsStandby)
	pf("Oversold seats across both databases: %d %v\n", r.Oversold, r.OversoldSeats)
	pf("Audit of the standby: passed %v\n", r.AuditOK)
	pf("Old epoch writes: fenced %v (%s)\n", r.OldPrimaryFenced, r.OldPrimaryWrite)
	for _, p := range r.Problems {
		pf("Problem: %s\n", p)
	}
	for _, n := range r.Notes {
		pf("Note: %s\n", n)
	}
	pf("\n--- failover promote ---\n%s\n--- smoke ---\n%s\n--- reconcile ---\n%s\n--- audit ---\n%s", r.Promote, r.Smoke, r.Reconcile, r.Audit)
	return nil
}

// WriteFiles writes report.txt and result.json to dir.
func (r *Result) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report dir: %w", err)
	}
	var b strings.Builder
	_ = r.WriteText(&b)
	if err := os.WriteFile(filepath.Join(dir, "report.txt"), []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "result.json"), j, 0o644); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return nil
}

func timeOr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func seqOr(p *uint64) string {
	if p == nil {
		return "?"
	}
	return fmt.Sprint(*p)
}

func lastSeq(rp failover.RecoveryPoint) uint64 {
	if len(rp.Streams) == 0 {
		return 0
	}
	return rp.Streams[0].LastSeq
}
