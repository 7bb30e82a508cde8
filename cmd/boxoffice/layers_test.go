package main

import (
	"os/exec"
	"path"
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
			if !strings.HasPrefix(imp, "boxoffice/") {
				continue
			}
			switch {
			case isTestKit(imp) && !isTestKit(pkg) && !labOrKit:
				t.Errorf("%s imports the test kit %s: test support stays out of product code", pkg, imp)
			case strings.HasPrefix(imp, "boxoffice/lab/") && !labOrKit:
				t.Errorf("%s imports the lab's %s", pkg, imp)
			case strings.HasPrefix(imp, "boxoffice/client") && !labOrKit && !strings.HasPrefix(pkg, "boxoffice/ops/"):
				// Operations tools (smoke's synthetic purchase) call the API
				// as any client does; the rest of the product answers it.
				t.Errorf("%s imports the generated client %s: the product answers its contract, it does not call it", pkg, imp)
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
