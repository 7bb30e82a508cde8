package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The production binary links no lab tool, no test kit and none of their
// libraries: those are cmd/boxoffice-lab's.
func TestProductionBinaryLeavesOutTheLab(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "boxoffice/cmd/boxoffice/roles", "the listing is of this binary")
	for _, dep := range deps {
		for _, banned := range []string{"boxoffice/lab/", "boxoffice/testkit", "gonum.org/", "github.com/vbauerster/mpb", "golang.org/x/term", "github.com/stretchr/testify"} {
			require.False(t, strings.HasPrefix(dep, banned), "the production binary links %s", dep)
		}
	}
}
