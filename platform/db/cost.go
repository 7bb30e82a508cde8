package db

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// This file attributes the database work of a process to the roles that
// did it (the relay, each consumer, the API's operations), so that a
// benchmark can say what one ticketed order costs and who spends it. A
// role is a context value: WithRole where a role's work starts, and every
// context derived from it (WithoutCancel included) carries it.

type roleKey struct{}

// WithRole returns ctx labelled with role, for CostTracer. An inner label
// replaces an outer one.
func WithRole(ctx context.Context, role string) context.Context {
	return context.WithValue(ctx, roleKey{}, role)
}

// Role is ctx's role, or "" when none was set.
func Role(ctx context.Context) string {
	role, _ := ctx.Value(roleKey{}).(string)
	return role
}

// Cost is the database work of one role.
type Cost struct {
	// Transactions are the transactions committed: explicit ones and
	// statements run outside of one (each its own transaction).
	Transactions int64
	// WriteTransactions are the Transactions that ran a statement that
	// writes: one whose command tag says it inserted, updated or deleted,
	// or whose text holds INSERT, UPDATE, DELETE or MERGE (a writing CTE
	// under a SELECT) or calls a function that writes (hold_reserve,
	// outbox_claim, outbox_settle).
	WriteTransactions int64
	// Statements are every statement run, BEGIN and COMMIT excluded.
	Statements int64
	// RowsWritten are the rows inserted, updated or deleted by statements
	// whose command tag says so (rows a writing CTE or a function wrote
	// are not seen).
	RowsWritten int64
	// RoundTrips are the requests sent to the server and waited on: each
	// statement, BEGIN and COMMIT sent alone is one, and a batch
	// (pgx.Batch: many statements in one request) is one however many
	// statements it holds.
	RoundTrips int64
	// StatementTime is the time from sending each statement (BEGIN and
	// COMMIT included) to its result, summed: the database's share of the
	// role's time, round trips and waits for locks and CPU included.
	StatementTime time.Duration
}

// CostTracer is a pgx.QueryTracer that counts each role's Cost. Set it as
// the pool's ConnConfig.Tracer (PoolConfig.Tracer). It counts what pgx
// sends through Exec and Query: COPY and batches are not seen.
type CostTracer struct {
	mu     sync.Mutex
	costs  map[string]*Cost
	conns  map[*pgx.Conn]*openTx
	writes map[string]bool // by statement text: may it write?
}

// writingSQL finds the statements that write whatever their command tag
// says: a data-modifying CTE under a SELECT, or a function that writes.
var writingSQL = regexp.MustCompile(`(?i)\b(insert|update|delete|merge)\b|\b(hold_reserve|outbox_claim|outbox_settle)\s*\(`)

// mayWrite reports whether sql may write, ignoring its comments.
func (t *CostTracer) mayWrite(sql string) bool {
	w, ok := t.writes[sql]
	if !ok {
		var b strings.Builder
		for line := range strings.SplitSeq(sql, "\n") {
			if i := strings.Index(line, "--"); i >= 0 {
				line = line[:i]
			}
			b.WriteString(line)
			b.WriteByte('\n')
		}
		w = writingSQL.MatchString(b.String())
		t.writes[sql] = w
	}
	return w
}

// openTx is what a connection's open transaction has done so far.
type openTx struct {
	role  string
	wrote bool
}

// NewCostTracer returns a tracer with nothing counted.
func NewCostTracer() *CostTracer {
	return &CostTracer{costs: map[string]*Cost{}, conns: map[*pgx.Conn]*openTx{}, writes: map[string]bool{}}
}

type traceKey struct{}

type traced struct {
	role  string
	sql   string
	start time.Time
	// batched: the statement went in a batch, whose round trip
	// TraceBatchEnd counts.
	batched bool
}

type batchKey struct{}

// TraceBatchStart implements pgx.BatchTracer.
func (t *CostTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	role := Role(ctx)
	if role == "" {
		role = "other"
	}
	return context.WithValue(ctx, batchKey{}, traced{role: role, start: time.Now(), batched: true})
}

// TraceBatchQuery implements pgx.BatchTracer: each statement of a batch
// is counted as TraceQueryEnd counts one sent alone, but for its round
// trip.
func (t *CostTracer) TraceBatchQuery(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchQueryData) {
	b, ok := ctx.Value(batchKey{}).(traced)
	if !ok {
		return
	}
	b.sql, b.start = data.SQL, time.Now()
	t.TraceQueryEnd(context.WithValue(ctx, traceKey{}, b), conn, pgx.TraceQueryEndData{CommandTag: data.CommandTag, Err: data.Err})
}

// TraceBatchEnd implements pgx.BatchTracer: the batch's one round trip,
// and its time.
func (t *CostTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	b, ok := ctx.Value(batchKey{}).(traced)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.costs[b.role]
	if c == nil {
		c = &Cost{}
		t.costs[b.role] = c
	}
	c.RoundTrips++
	c.StatementTime += time.Since(b.start)
}

// TraceQueryStart implements pgx.QueryTracer.
func (t *CostTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	role := Role(ctx)
	if role == "" {
		role = "other"
	}
	return context.WithValue(ctx, traceKey{}, traced{role: role, sql: data.SQL, start: time.Now()})
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *CostTracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	q, ok := ctx.Value(traceKey{}).(traced)
	if !ok {
		return
	}
	// The statement's first word, lower-cased alone: lower-casing the
	// whole statement (hold_reserve's is long) was most of this tracer's
	// cost, and the bench counts it as the product's.
	verb := strings.TrimSpace(q.sql)
	if i := strings.IndexAny(verb, " ;\n\t"); i >= 0 {
		verb = verb[:i]
	}
	verb = strings.ToLower(verb)
	tag := data.CommandTag
	tagWrote := tag.Insert() || tag.Update() || tag.Delete()
	t.mu.Lock()
	defer t.mu.Unlock()
	wrote := tagWrote || (data.Err == nil && t.mayWrite(q.sql))
	c := t.costs[q.role]
	if c == nil {
		c = &Cost{}
		t.costs[q.role] = c
	}
	c.StatementTime += time.Since(q.start)
	if !q.batched {
		c.RoundTrips++
	}
	tx := t.conns[conn]
	switch {
	case verb == "begin":
		if data.Err == nil {
			t.conns[conn] = &openTx{role: q.role}
		}
		return
	case verb == "commit" || verb == "rollback":
		delete(t.conns, conn)
		if tx == nil || data.Err != nil || verb == "rollback" {
			return
		}
		owner := t.costs[tx.role]
		if owner == nil {
			owner = &Cost{}
			t.costs[tx.role] = owner
		}
		owner.Transactions++
		if tx.wrote {
			owner.WriteTransactions++
		}
		return
	}
	c.Statements++
	if tagWrote {
		c.RowsWritten += tag.RowsAffected()
	}
	switch {
	case tx != nil:
		tx.wrote = tx.wrote || wrote
	case data.Err == nil:
		c.Transactions++
		if wrote {
			c.WriteTransactions++
		}
	}
}

// RoleCost is one role's Cost.
type RoleCost struct {
	Role string
	Cost
}

// Costs returns every role's cost so far, the largest first.
func (t *CostTracer) Costs() []RoleCost {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]RoleCost, 0, len(t.costs))
	for role, c := range t.costs {
		out = append(out, RoleCost{Role: role, Cost: *c})
	}
	slices.SortFunc(out, func(a, b RoleCost) int {
		if a.Transactions != b.Transactions {
			return int(b.Transactions - a.Transactions)
		}
		return strings.Compare(a.Role, b.Role)
	})
	return out
}

// Reset forgets what was counted.
func (t *CostTracer) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.costs = map[string]*Cost{}
}
