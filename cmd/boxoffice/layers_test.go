package main

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// floors are the project's layers, lowest first: a package imports
// packages of its own floor or below, never above. The three edge
// packages (the relay, the consumer runtime, the HTTP edge) are siblings
// and do not import each other.
var floors = []struct {
	prefix string
	floor  int
	name   string
}{
	{"boxoffice/sqlcgen", 0, "generated SQL"},
	{"boxoffice/migrations", 0, "generated SQL"},
	{"boxoffice/platform/", 1, "platform"},
	{"boxoffice/domain/", 2, "domain"},
	{"boxoffice/relay", 3, "edge"},
	{"boxoffice/consumers", 3, "edge"},
	{"boxoffice/handlers", 3, "edge"},
	{"boxoffice/ops/", 4, "operations"},
	{"boxoffice/cmd/", 5, "commands"},
	{"boxoffice/lab/", 5, "lab"},
}

func floorOf(pkg string) (floor int, name string, ok bool) {
	for _, f := range floors {
		if pkg == strings.TrimSuffix(f.prefix, "/") || strings.HasPrefix(pkg, f.prefix) {
			return f.floor, f.name, true
		}
	}
	return 0, "", false
}

// top is a package's first path element in the module: "relay",
// "consumers", "handlers", …
func top(pkg string) string {
	return strings.SplitN(strings.TrimPrefix(pkg, "boxoffice/"), "/", 2)[0]
}

// isTestKit reports whether pkg is test support: testkit/ or a package
// named for it (stripemocktest, natstest, dbtest).
func isTestKit(pkg string) bool {
	return strings.HasPrefix(pkg, "boxoffice/testkit") || strings.HasSuffix(path.Base(pkg), "test")
}

// clientModule is the Go client's module (client/go.mod): a module of its
// own, so its packages are outside boxoffice/... and checked by path.
const clientModule = "github.com/boxoffice/boxoffice/client"

// Layers hold by the build, not by convention: no package imports a floor
// above its own, the edge packages stay siblings, test kits reach no
// product code (only tests, the lab and other kits), and the lab and the
// generated Go client reach only the lab, the examples and the kits (and,
// for the client, the operations tools that act as a client: smoke).
// (go list's Imports leaves out what only a package's tests import.)
func TestLayersImportOnlyDownward(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "boxoffice/...").CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Greater(t, len(lines), 30, "the listing is of the whole module")
	for _, line := range lines {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		from, fromName, layered := floorOf(pkg)
		labOrKit := strings.HasPrefix(pkg, "boxoffice/lab/") || pkg == "boxoffice/cmd/boxoffice-lab" ||
			isTestKit(pkg) || strings.HasPrefix(pkg, "boxoffice/examples/")
		for _, imp := range imports {
			if imp == clientModule || strings.HasPrefix(imp, clientModule+"/") {
				if !labOrKit && !strings.HasPrefix(pkg, "boxoffice/ops/") {
					// Operations tools (smoke's synthetic purchase) call the API
					// as any client does; the rest of the product answers it.
					t.Errorf("%s imports the generated client %s: the product answers its contract, it does not call it", pkg, imp)
				}
				continue
			}
			if !strings.HasPrefix(imp, "boxoffice/") {
				continue
			}
			switch {
			case isTestKit(imp) && !isTestKit(pkg) && !labOrKit:
				t.Errorf("%s imports the test kit %s: test support stays out of product code", pkg, imp)
			case strings.HasPrefix(imp, "boxoffice/lab/") && !labOrKit:
				t.Errorf("%s imports the lab's %s", pkg, imp)
			}
			to, toName, ok := floorOf(imp)
			if !layered || !ok || isTestKit(pkg) {
				continue
			}
			if to > from {
				t.Errorf("%s (%s) imports %s (%s), a floor above it", pkg, fromName, imp, toName)
			}
			if from == 3 && to == 3 && top(pkg) != top(imp) {
				t.Errorf("%s imports %s: the relay, the consumer runtime and the HTTP edge are siblings", pkg, imp)
			}
		}
	}
}

// tableOwners is the one package that writes each table (issue 28: one
// owner per table). Everything else that changes a table asks its owner.
// The domain owns the business tables; platform packages own their
// mechanisms' tables; the operations tools own their own records.
var tableOwners = map[string]string{
	// domain/catalog: what is on sale.
	"events":           "boxoffice/domain/catalog",
	"seats":            "boxoffice/domain/catalog",
	"price_categories": "boxoffice/domain/catalog",
	// domain/purchase: holds, orders and refunds, and the hold's
	// idempotency keys (hold_reserve).
	"holds":            "boxoffice/domain/purchase",
	"hold_seats":       "boxoffice/domain/purchase",
	"orders":           "boxoffice/domain/purchase",
	"refunds":          "boxoffice/domain/purchase",
	"idempotency_keys": "boxoffice/domain/purchase",
	// The organizer's blocks are seat ownership, decided under the seat
	// locks a hold takes (domain/purchase/organizer_seats.go).
	"seat_blocks": "boxoffice/domain/purchase",
	// free_seats (00042) is in no package's hands: only triggers on
	// hold_seats, tickets, seat_blocks and seats write it, in the
	// transaction of the write that changes a seat's owner;
	// hold_best_available and the audit read it.
	// domain/payments: the provider's webhooks it took in; the payments
	// row of each order through its package record (below the purchase
	// saga, which asks it too); the sandbox provider's own state.
	"stripe_events":              "boxoffice/domain/payments",
	"payments":                   "boxoffice/domain/payments/record",
	"sandbox_payment_intents":    "boxoffice/domain/payments/sandbox",
	"sandbox_refunds":            "boxoffice/domain/payments/sandbox",
	"sandbox_idempotency_keys":   "boxoffice/domain/payments/sandbox",
	"sandbox_requests":           "boxoffice/domain/payments/sandbox",
	"sandbox_webhook_deliveries": "boxoffice/domain/payments/sandbox",
	// domain/tickets: the check-ins at the door; the tickets rows through
	// its package ledger (below the refund in domain/purchase, which asks
	// it too).
	"tickets":   "boxoffice/domain/tickets/ledger",
	"check_ins": "boxoffice/domain/tickets",
	// domain/waitingroom: the onsale settings.
	"onsales": "boxoffice/domain/waitingroom",
	// The onsale's phases and presale codes (issue 30 item 3); hold_reserve
	// only reads them.
	"onsale_phases":       "boxoffice/domain/waitingroom",
	"presale_codes":       "boxoffice/domain/waitingroom",
	"presale_redemptions": "boxoffice/domain/waitingroom",
	// The waitlist of sold-out events (issue 30 item 5); its offers'
	// seats are seat_blocks rows, written by domain/purchase.
	"waitlist_entries": "boxoffice/domain/waitlist",
	// domain/webhooks: organizers' endpoints and what is sent to them.
	"webhook_endpoints":    "boxoffice/domain/webhooks",
	"webhook_messages":     "boxoffice/domain/webhooks",
	"webhook_deliveries":   "boxoffice/domain/webhooks",
	"webhook_attempts":     "boxoffice/domain/webhooks",
	"webhook_redeliveries": "boxoffice/domain/webhooks",
	// platform: the mechanisms.
	"outbox":              "boxoffice/platform/outbox",
	"outbox_leases":       "boxoffice/platform/outbox",
	"outbox_history":      "boxoffice/platform/outbox",
	"inbox":               "boxoffice/platform/inbox",
	"idempotent_requests": "boxoffice/platform/idempotency",
	"api_keys":            "boxoffice/platform/apikey",
	// The organizer's row, ensured by the catalog (an event) and the API
	// keys (a key), a floor apart.
	"organizers": "boxoffice/platform/organizer",
	// operations: their own records.
	"region_epoch":             "boxoffice/ops/failover",
	"failover_paused_events":   "boxoffice/ops/failover",
	"failover_recovery_points": "boxoffice/ops/failover",
	"reconcile_repairs":        "boxoffice/ops/reconcile",
}

// writeExceptions are the writes of a table by a package other than its
// owner that stay, each for the reason given. A new one is a decision,
// not an accident: add it here with its reason, or ask the owner.
var writeExceptions = []struct{ pkg, table, why string }{
	{"boxoffice/domain/purchase", "outbox", "hold_reserve writes the hold's PaymentAuthorizationRequested in the statement " +
		"that takes the hold: one round trip per hold (docs/performance.md); every other event goes through outbox.Insert"},
	{"boxoffice/ops/failover", "onsales", "stopping a cell pauses its onsales and records which, in one statement, " +
		"so resume reopens exactly those"},
	{"boxoffice/domain/purchase", "outbox_history", "hold_reserve writes the history rows of the events it writes, " +
		"in the same statement (see outbox above); every other event's row goes with outbox.Insert"},
	{"boxoffice/ops/retention", "inbox", "retention deletes rows past their retention from bounded tables of several owners"},
	{"boxoffice/ops/retention", "outbox_history", "retention deletes rows past their retention"},
	{"boxoffice/ops/retention", "stripe_events", "retention deletes rows past their retention"},
	{"boxoffice/ops/retention", "idempotency_keys", "retention deletes rows past their retention"},
	{"boxoffice/ops/retention", "idempotent_requests", "retention deletes rows past their retention"},
	{"boxoffice/cmd/boxoffice-lab", "orders", "the lab's stream benchmark moves orders to drive the pipeline; it is no product code"},
}

// sqlImportExceptions are packages that own no table and still import
// sqlcgen, to read; the operations tools (boxoffice/ops/…) may besides,
// since they read across tables.
var sqlImportExceptions = []struct{ pkg, why string }{
	{"boxoffice/domain/cells", "routes a request to the cell that holds an id: it reads the directory " +
		"(which cell has this event, order, intent, organizer) and writes nothing"},
	{"boxoffice/cmd/boxoffice-lab", "the lab's stream benchmark (see writeExceptions)"},
	{"boxoffice/domain/timeline", "tells one order's story for the timeline command and the organizer's API: " +
		"it reads the order's rows across the tables of several owners and writes nothing"},
}

// sqlcgen is reachable only from the packages that own tables, the
// operations tools and the exceptions above: the edge packages (relay,
// consumers, handlers), the commands and the rest of the domain ask an
// owner. Together with TestLayersImportOnlyDownward (no domain package
// imports handlers; testkit stays out of product code) this is the
// layering issue 28 asks for, held by the build.
func TestOnlyTableOwnersImportSQL(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "boxoffice/...").CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	allowed := map[string]string{}
	for _, owner := range tableOwners {
		allowed[owner] = "owns a table"
	}
	for _, e := range sqlImportExceptions {
		allowed[e.pkg] = e.why
	}
	importers := map[string]bool{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := fields[0]
		if pkg == "boxoffice/sqlcgen" || !slices.Contains(fields[1:], "boxoffice/sqlcgen") {
			continue
		}
		importers[pkg] = true
		if _, ok := allowed[pkg]; !ok && !strings.HasPrefix(pkg, "boxoffice/ops/") && !isTestKit(pkg) {
			t.Errorf("%s imports boxoffice/sqlcgen but owns no table: ask the table's owner (tableOwners), "+
				"or list it in sqlImportExceptions with the reason", pkg)
		}
	}
	for _, e := range sqlImportExceptions {
		require.True(t, importers[e.pkg], "%s no longer imports sqlcgen: drop it from sqlImportExceptions", e.pkg)
	}
	for _, edge := range []string{"boxoffice/relay", "boxoffice/consumers", "boxoffice/handlers"} {
		require.False(t, importers[edge], "%s is an edge package: it asks the owners, never sqlcgen", edge)
	}
}

// Each table has one writer: every call of a generated query that
// inserts, updates or deletes rows of a table (itself, or through a
// function of migrations/functions/ it calls) is made from the table's
// owner, or is one of writeExceptions. Tests and the generated code are
// not looked at.
func TestEveryTableHasOneWriter(t *testing.T) {
	t.Parallel()
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	require.NoError(t, err)
	writes := queryWrites(t, strings.TrimSpace(string(root)))
	require.Contains(t, writes["OutboxInsert"], "outbox", "the parse of queries/ finds the writes")
	require.Contains(t, writes["HoldReserve"], "holds", "the parse of migrations/functions/ finds the writes")

	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}} {{join .GoFiles \" \"}}", "boxoffice/...").CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	call := regexp.MustCompile(`\.([A-Z][A-Za-z0-9]*)\(`)
	excepted := map[[2]string]bool{}
	for _, e := range writeExceptions {
		excepted[[2]string{e.pkg, e.table}] = true
	}
	seen := map[[2]string]bool{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, dir := fields[0], fields[1]
		if pkg == "boxoffice/sqlcgen" {
			continue
		}
		for _, name := range fields[2:] {
			src, err := os.ReadFile(filepath.Join(dir, name))
			require.NoError(t, err)
			if !strings.Contains(string(src), `"boxoffice/sqlcgen"`) {
				continue
			}
			for _, m := range call.FindAllStringSubmatch(string(src), -1) {
				for _, table := range writes[m[1]] {
					owner, ok := tableOwners[table]
					require.True(t, ok, "%s/%s writes %s (%s), which has no owner in tableOwners", pkg, name, table, m[1])
					key := [2]string{pkg, table}
					seen[key] = true
					if pkg != owner && !excepted[key] {
						t.Errorf("%s/%s writes %s with %s; its owner is %s: ask it, or list the write in writeExceptions with the reason",
							pkg, name, table, m[1], owner)
					}
				}
			}
		}
	}
	for _, e := range writeExceptions {
		require.True(t, seen[[2]string{e.pkg, e.table}], "%s no longer writes %s: drop it from writeExceptions", e.pkg, e.table)
	}
}

// queryWrites maps each generated query (queries/*.sql, by its sqlc name)
// to the tables it inserts into, updates or deletes from, directly or
// through the functions of migrations/functions/ it calls.
func queryWrites(t *testing.T, root string) map[string][]string {
	t.Helper()
	write := regexp.MustCompile(`(?i)\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+([a-z_][a-z0-9_]*)`)
	comment := regexp.MustCompile(`--[^\n]*`)
	tables := func(sql string) []string {
		var out []string
		for _, m := range write.FindAllStringSubmatch(comment.ReplaceAllString(sql, ""), -1) {
			switch name := strings.ToLower(m[1]); name {
			case "set", "of", "skip", "nowait": // ON CONFLICT DO UPDATE SET, FOR UPDATE OF / SKIP LOCKED
			default:
				if !slices.Contains(out, name) {
					out = append(out, name)
				}
			}
		}
		return out
	}
	functions := map[string][]string{}
	files, err := filepath.Glob(filepath.Join(root, "migrations", "functions", "*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		functions[strings.TrimSuffix(filepath.Base(f), ".sql")] = tables(string(src))
	}
	files, err = filepath.Glob(filepath.Join(root, "queries", "*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	writes := map[string][]string{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, q := range strings.Split(string(src), "-- name: ")[1:] {
			name, body, _ := strings.Cut(q, " ")
			ts := tables(body)
			for fn, fts := range functions {
				if strings.Contains(body, fn+"(") {
					for _, table := range fts {
						if !slices.Contains(ts, table) {
							ts = append(ts, table)
						}
					}
				}
			}
			if len(ts) > 0 {
				writes[name] = ts
			}
		}
	}
	return writes
}
