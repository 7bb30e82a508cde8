package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StartStandby makes a hot standby of the running cluster primary in
// cfg.Dir and starts it: PostgreSQL's own streaming replication, from a
// base backup taken with pg_basebackup -R (which writes standby.signal and
// the primary_conninfo that points at primary). When StartStandby returns
// nil the standby accepts read-only connections at URL and replays the
// primary's WAL asynchronously, so it lags the primary by whatever WAL had
// not reached it yet; a commit on the primary is not a commit on the
// standby until it has been replayed.
//
// A standby already in cfg.Dir (from an earlier call, or one promoted
// since) is reused as it is, like Start reuses a cluster. The base backup
// is built in data.new and renamed into place, so a run killed halfway
// leaves nothing that looks like a cluster.
func StartStandby(ctx context.Context, primary *Cluster, cfg Config) (*Cluster, error) {
	c, err := startWith(ctx, cfg, func(ctx context.Context, c *Cluster) error {
		return c.baseBackup(ctx, primary)
	})
	if err != nil {
		return nil, fmt.Errorf("start standby of %s: %w", primary.dir, err)
	}
	return c, nil
}

// baseBackup copies primary's data directory over a replication
// connection unless Dir already holds a cluster.
func (c *Cluster) baseBackup(ctx context.Context, primary *Cluster) error {
	return c.buildDataDir("standby", "base backup", func(building string) (*exec.Cmd, error) {
		c.log.Info("taking a base backup of the primary", "primary_port", primary.port)
		return c.command(ctx, "pg_basebackup",
			"-h", "127.0.0.1",
			"-p", strconv.Itoa(primary.port),
			"-U", "postgres",
			"-D", building,
			"-R",           // standby.signal and primary_conninfo
			"-X", "stream", // the WAL written during the copy, over a second connection
			"-c", "fast", // checkpoint now rather than wait for the next one
			"--no-sync",
		), nil
	})
}

// InRecovery reports whether the cluster is a standby that has not been
// promoted: its data directory holds standby.signal, which PostgreSQL
// removes when promotion completes.
func (c *Cluster) InRecovery() bool {
	_, err := os.Stat(filepath.Join(c.dataDir, "standby.signal"))
	return err == nil
}

// Promote makes a standby a primary that accepts writes, with pg_ctl
// promote, and waits until it does (or ctx ends). Promoting a cluster that
// is no longer a standby is a no-op, so Promote is safe to call twice.
// The promoted cluster begins a new timeline: the old primary can never
// stream to it again without being rebuilt (or rewound) from it.
func (c *Cluster) Promote(ctx context.Context) error {
	if !c.InRecovery() {
		return nil
	}
	timeout := startTimeout
	if deadline, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(deadline))
	}
	err := c.run(c.command(ctx, "pg_ctl", "promote", "-w",
		"-t", strconv.Itoa(max(1, int(timeout.Seconds()))),
		"-D", c.dataDir))
	if err != nil && !strings.Contains(err.Error(), "not in standby mode") {
		return fmt.Errorf("promote %s: %w", c.dir, err)
	}
	c.log.Info("postgres promoted")
	return nil
}

// Kill stops the server as a power cut would: SIGKILL to the postmaster,
// whose backends then exit on their own without writing anything more.
// It returns once the postmaster is gone. Nothing is flushed: what the
// standby had not received is lost to it, which is what a failover drill
// wants to measure. Start (or StartStandby) with the same Dir brings the
// cluster back, through crash recovery. Killing a cluster that is not
// running is a no-op.
func (c *Cluster) Kill(ctx context.Context) error {
	b, err := os.ReadFile(filepath.Join(c.dataDir, "postmaster.pid"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("kill postgres: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 || !isPostgres(pid) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill postgres (pid %d): %w", pid, err)
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for isPostgres(pid) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("kill postgres (pid %d): %w", pid, ctx.Err())
		case <-t.C:
		}
	}
	// A dead postmaster's pid file would make Stop wait for it; Start
	// would remove it too.
	if err := os.Remove(filepath.Join(c.dataDir, "postmaster.pid")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("kill postgres: %w", err)
	}
	c.log.Info("postgres killed", "pid", pid)
	return nil
}

// isZombie reports whether process pid has exited and waits only to be
// reaped (by an init that may never do it, in a container).
func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, so read after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}
