package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"boxoffice/lab/gameday"
)

// errGameDayFailed makes `boxoffice-lab gameday` exit non-zero after a run
// that lost an event that had crossed, oversold a seat, failed its audit
// or let the old epoch write.
var errGameDayFailed = errors.New("the game day found a broken promise (see the report)")

// runGameDay runs `boxoffice-lab gameday`: -runs regional failover drills in
// a row (package gameday), each reported in -report/run-N.
func runGameDay(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("gameday", flag.ContinueOnError)
	runs := fs.Int("runs", 1, "game days in a row")
	seats := fs.Int("seats", 300, "seats of the onsale: enough that the kill falls mid-sale")
	buyers := fs.Int("buyers", 6, "buyers at once")
	killMin := fs.Duration("kill-min", 4*time.Second, "earliest moment of the kill, after the sale starts")
	killMax := fs.Duration("kill-max", 12*time.Second, "latest moment of the kill")
	seed := fs.Uint64("seed", 0, "seed of the kill moment (0: random; run i uses seed+i)")
	report := fs.String("report", "gameday-report", "write report.txt and result.json of each run under this directory")
	keep := fs.Bool("keep", false, "keep each run's clusters, stores and logs (a failed run always keeps them)")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	failed := false
	var results []*gameday.Result
	for i := range *runs {
		dir, err := os.MkdirTemp("", "boxoffice-gameday-")
		if err != nil {
			return fmt.Errorf("gameday dir: %w", err)
		}
		// PostgreSQL may run as another user when we are root.
		_ = os.Chmod(dir, 0o755)
		fmt.Fprintf(stdout, "Game day %d of %d (work dir %s)\n", i+1, *runs, dir)
		s := *seed
		if s != 0 {
			s += uint64(i)
		}
		res, err := gameday.Run(ctx, gameday.Config{
			Dir: dir, Seats: *seats, Buyers: *buyers, KillMin: *killMin, KillMax: *killMax, Seed: s, Out: stdout,
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			fmt.Fprintf(stdout, "Game day %d could not run: %v\nLogs: %s\n", i+1, err, dir)
			if res != nil {
				_ = res.WriteFiles(filepath.Join(*report, fmt.Sprintf("run-%d", i+1)))
			}
			return err
		}
		out := filepath.Join(*report, fmt.Sprintf("run-%d", i+1))
		if err := res.WriteFiles(out); err != nil {
			return err
		}
		results = append(results, res)
		fmt.Fprintf(stdout, "Report: %s/report.txt\n\n", out)
		if !res.OK() {
			failed = true
			fmt.Fprintf(stdout, "Logs kept: %s\n", dir)
		} else if !*keep {
			_ = os.RemoveAll(dir)
		}
	}
	fmt.Fprintln(stdout, "run  kill@   replay-lag(B)  stream-lag  lost-orders  lost-events(crossed)  RTO-smoke  RTO-hold  oversold  audit  fenced")
	for i, r := range results {
		fmt.Fprintf(stdout, "%3d  %5.1fs  %13s  %10d  %11d  %11d(%d)  %8.1fs  %7.1fs  %8d  %5v  %6v\n", i+1, r.KillAfterSeconds,
			lagString(r), r.AtCut.StreamLag, len(r.LostOrders), len(r.LostEvents), len(r.LostCrossedEvents),
			r.RTOSmokeSeconds, r.RTOFirstHoldSeconds, r.Oversold, r.AuditOK, r.OldPrimaryFenced)
	}
	if failed {
		return errGameDayFailed
	}
	return nil
}

func lagString(r *gameday.Result) string {
	if r.AtCut.ReplayLagBytes == nil {
		return "?"
	}
	return fmt.Sprint(*r.AtCut.ReplayLagBytes)
}
