//go:build gameday

package gameday_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"boxoffice/lab/gameday"
)

// A short game day (make test-gameday): the primary region is SIGKILLed
// mid-sale, the commands fail over to the standby, and the onsale sells
// out there. It fails on any event lost that had reached the standby's
// stream, any seat ticketed twice across both databases, an audit failure
// or an old epoch that could still write.
func TestGameDay(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		require.NoError(t, os.Chmod(dir, 0o755))
		require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	}
	bin := filepath.Join(dir, "boxoffice-lab")
	build := exec.Command("go", "build", "-o", bin, "boxoffice/cmd/boxoffice-lab")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var progress strings.Builder
	res, err := gameday.Run(ctx, gameday.Config{
		Dir: filepath.Join(dir, "run"), Bin: bin, Seats: 100, Buyers: 4,
		KillMin: 2 * time.Second, KillMax: 5 * time.Second, SaleTimeout: 3 * time.Minute, Out: &progress,
	})
	t.Log(progress.String())
	require.NoError(t, err)
	var report strings.Builder
	require.NoError(t, res.WriteText(&report))
	t.Log(report.String())
	require.Empty(t, res.LostCrossedEvents, "events lost that had reached the standby's stream")
	require.Zero(t, res.Oversold, "seats ticketed twice across both databases: %v", res.OversoldSeats)
	require.True(t, res.AuditOK, "the standby's audit")
	require.True(t, res.OldPrimaryFenced, "the old epoch wrote: %s", res.OldPrimaryWrite)
	require.Empty(t, res.Problems)
	require.True(t, res.SoldOut, "the onsale sells out in the standby")
	require.Positive(t, res.HoldsAfterFailover, "the standby sold")
}
