// Package pgcluster runs a private PostgreSQL cluster from the PostgreSQL
// binaries installed on this machine, for `boxoffice dev` and for tests on
// machines that have PostgreSQL installed but no server running.
//
// The cluster listens on 127.0.0.1 only, trusts every local connection, and
// has one superuser, postgres. It is meant for development and tests, never
// for production data.
package pgcluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config says where and how to run a cluster. The zero value is usable.
type Config struct {
	// Dir holds the cluster: its data files in Dir/data, its log in
	// Dir/postgres.log and its Unix socket in Dir itself. Dir is created if
	// missing, and a cluster already initialised in Dir is reused with its
	// data. Defaults to boxoffice/postgres under os.UserCacheDir().
	Dir string

	// Port is the TCP port the server listens on at 127.0.0.1; 0 picks a
	// free port each time the cluster starts. Defaults to 0.
	Port int

	// Fast trades durability for speed: it turns off fsync,
	// synchronous_commit and full_page_writes, so a machine crash can
	// corrupt the cluster. Use it for throwaway test clusters, never for a
	// cluster whose data should survive. Defaults to false.
	Fast bool

	// Temporary makes the cluster disposable: once this process exits,
	// however it exits (even killed with SIGKILL), a small watcher process
	// stops the server and deletes Dir with everything in it. Stop deletes
	// Dir too. Defaults to false.
	Temporary bool

	// Settings are server settings given at each start, as name=value
	// (postgres -c), after the cluster's own: for example
	// "shared_preload_libraries=pg_stat_statements". Values must not hold
	// spaces or quotes.
	Settings []string

	// Logger receives progress messages. Defaults to discarding them.
	Logger *slog.Logger
}

// Cluster is a running PostgreSQL server started by Start.
type Cluster struct {
	dir     string
	dataDir string
	port    int
	bin     string
	cred    *syscall.Credential // nil: run as ourselves
	runAs   string              // the user cred stands for
	log     *slog.Logger

	// reaper watches this process for Temporary clusters; closing
	// reaperPipe makes it stop the server and delete dir.
	reaper     *exec.Cmd
	reaperPipe *os.File

	stopOnce sync.Once
	stopErr  error
}

// startTimeout bounds how long pg_ctl waits for the server to accept
// connections, on top of any deadline in the caller's context.
const startTimeout = 120 * time.Second

// Start initialises a cluster in cfg.Dir unless one is there already, and
// starts its server. When Start returns nil the server accepts connections
// at URL, and it keeps running, independently of ctx, until Stop is called
// (or, for a Temporary cluster, until this process exits). ctx bounds only
// the startup.
//
// A server that an earlier, killed run left running from the same Dir is
// stopped first, and a stale postmaster.pid is removed. PostgreSQL refuses
// to run as root, so when this process runs as root the cluster is owned
// and run by the user postgres, or nobody when there is no such user.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	c, err := start(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	return c, nil
}

func start(ctx context.Context, cfg Config) (*Cluster, error) {
	return startWith(ctx, cfg, func(ctx context.Context, c *Cluster) error { return c.initdb(ctx) })
}

// startWith is Start with the step that creates the data directory when
// Dir has none: initdb for a new cluster, a base backup for a standby.
func startWith(ctx context.Context, cfg Config, create func(context.Context, *Cluster) error) (c *Cluster, err error) {
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("port %d out of range", cfg.Port)
	}
	dir := cfg.Dir
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("default directory: %w", err)
		}
		dir = filepath.Join(cache, "boxoffice", "postgres")
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("directory %q: %w", cfg.Dir, err)
	}

	bin, err := BinDir()
	if err != nil {
		return nil, err
	}

	c = &Cluster{
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		bin:     bin,
		log:     log.With("dir", dir),
	}

	if os.Geteuid() == 0 {
		if err := c.dropRoot(); err != nil {
			return nil, err
		}
	}

	// Parents we create are searchable by everyone, so that the server
	// user can reach Dir when we run as root; Dir itself is private.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("create directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("create directory: %w", err)
	}
	if c.cred != nil {
		// Parents just created under a strict umask may be private.
		if err := c.checkReachable(); err != nil {
			return nil, err
		}
		err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(path, int(c.cred.Uid), int(c.cred.Gid))
		})
		if err != nil {
			return nil, fmt.Errorf("hand %s to the server user: %w", dir, err)
		}
	}

	if cfg.Temporary {
		if err := c.startReaper(); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				// The reaper deletes Dir once its pipe closes.
				c.stopReaper()
			}
		}()
	}

	if err := create(ctx, c); err != nil {
		return nil, err
	}
	if err := c.clearLeftover(ctx); err != nil {
		return nil, err
	}

	opts := []string{
		"-c listen_addresses=127.0.0.1",
		"-c max_connections=200",
	}
	if sock := filepath.Join(dir, ".s.PGSQL.65535"); len(sock) < 100 {
		opts = append(opts, "-k "+shellQuote(dir))
	} else {
		// Unix socket paths are limited to about 100 bytes; the TCP
		// listener is enough.
		c.log.Warn("directory path too long for a Unix socket; listening on TCP only")
		opts = append(opts, "-c unix_socket_directories=''")
	}
	if cfg.Fast {
		opts = append(opts, "-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off")
	}
	for _, setting := range cfg.Settings {
		if strings.ContainsAny(setting, " '\"\\") || !strings.Contains(setting, "=") {
			return nil, fmt.Errorf("server setting %q: want name=value without spaces or quotes", setting)
		}
		opts = append(opts, "-c "+setting)
	}

	// A port we picked can be taken by someone else before the server binds
	// it; then we pick another.
	for attempt := 1; ; attempt++ {
		port := cfg.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				return nil, err
			}
		}
		err = c.pgctlStart(ctx, port, opts)
		if err == nil {
			c.port = port
			break
		}
		if !errors.Is(err, errPortInUse) || cfg.Port != 0 || attempt == 3 {
			return nil, err
		}
		c.log.Debug("port taken, trying another", "port", port)
	}
	c.log.Info("postgres started", "url", c.URL())
	return c, nil
}

// URL returns the connection URL of the cluster's postgres database as its
// superuser postgres, who needs no password:
// postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Port returns the TCP port the server listens on at 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// Dir returns the absolute path of the directory that holds the cluster.
func (c *Cluster) Dir() string { return c.dir }

// Stop shuts the server down with pg_ctl stop -m fast, which disconnects
// every client and rolls back their open transactions, and waits until the
// server has exited. For a Temporary cluster it then deletes Dir. Calling
// Stop again returns the first call's result.
func (c *Cluster) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() {
		err := c.pgctlStop(ctx, "fast")
		if c.reaper != nil {
			if rmErr := os.RemoveAll(c.dir); rmErr != nil && err == nil {
				err = rmErr
			}
			c.stopReaper()
		}
		if err != nil {
			c.stopErr = fmt.Errorf("stop postgres: %w", err)
			return
		}
		c.log.Info("postgres stopped")
	})
	return c.stopErr
}

// BinDir returns the directory holding the local PostgreSQL programs
// (initdb, pg_ctl, postgres, psql, pgbench).
func BinDir() (string, error) {
	hasInitdb := func(dir string) bool {
		fi, err := os.Stat(filepath.Join(dir, "initdb"))
		return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
	}
	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		out, err := exec.Command(pgConfig, "--bindir").Output()
		// pg_config can come from a client-only package whose bindir has
		// no server binaries.
		if dir := strings.TrimSpace(string(out)); err == nil && hasInitdb(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		return versionOf(dirs[i]) > versionOf(dirs[j])
	})
	for _, dir := range dirs {
		if hasInitdb(dir) {
			return dir, nil
		}
	}
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if resolved, err := filepath.EvalSymlinks(initdb); err == nil {
			initdb = resolved
		}
		return filepath.Dir(initdb), nil
	}
	return "", errors.New("no PostgreSQL server binaries found: looked for pg_config --bindir, /usr/lib/postgresql/*/bin/initdb and initdb on PATH; install the PostgreSQL server package (e.g. apt-get install postgresql) or point the application at a running server")
}

// versionOf returns the numeric version in /usr/lib/postgresql/VERSION/bin.
func versionOf(bin string) float64 {
	v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(bin)), 64)
	if err != nil {
		return -1
	}
	return v
}

// dropRoot picks the unprivileged user the server runs as and checks that
// it can reach Dir.
func (c *Cluster) dropRoot() error {
	u, err := user.Lookup("postgres")
	if err != nil {
		if u, err = user.Lookup("nobody"); err != nil {
			return errors.New("running as root, and PostgreSQL refuses to run as root, but there is neither a postgres nor a nobody user to run it as")
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("user %s has a non-numeric uid %q or gid %q", u.Username, u.Uid, u.Gid)
	}
	c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
	c.runAs = u.Username
	c.log.Debug("running as root; postgres runs as another user", "user", u.Username, "uid", uid)
	return c.checkReachable()
}

// checkReachable checks that the server user can enter every existing
// parent of Dir.
func (c *Cluster) checkReachable() error {
	for p := filepath.Dir(c.dir); ; p = filepath.Dir(p) {
		if !searchable(p, c.cred.Uid, c.cred.Gid) {
			return fmt.Errorf("running as root, so PostgreSQL must run as user %s, but %[1]s cannot reach %s because %s is not searchable by it: put Dir under a directory every user can enter, such as %s, or run chmod o+x %[3]s", c.runAs, c.dir, p, os.TempDir())
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// searchable reports whether the user uid with primary group gid may enter
// the directory dir, judged by its permission bits. A directory that does
// not exist yet counts as searchable: Start creates it so.
func searchable(dir string, uid, gid uint32) bool {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return true
	} else if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == uid:
		return perm&0o100 != 0
	case st.Gid == gid:
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// command prepares one of the PostgreSQL programs to run as the server
// user, in Dir, without PG* variables from our environment, in a process
// group of its own so that a Ctrl-C meant for us does not reach it.
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// Should a child keep our output pipe open, give up on it rather than
	// hang.
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs a PostgreSQL program and returns its output in the error when it
// fails.
func (c *Cluster) run(cmd *exec.Cmd) error {
	c.log.Debug("run", "cmd", cmd.String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		if msg := strings.TrimSpace(string(out)); msg != "" {
			return fmt.Errorf("%s: %w: %s", filepath.Base(cmd.Path), err, msg)
		}
		return fmt.Errorf("%s: %w", filepath.Base(cmd.Path), err)
	}
	return nil
}

// initdb creates the cluster unless Dir already has one. It builds the
// cluster in data.new and renames it into place, so that a run killed
// halfway never leaves something that looks like a cluster.
func (c *Cluster) initdb(ctx context.Context) error {
	return c.buildDataDir("cluster", "initialise cluster", func(building string) (*exec.Cmd, error) {
		if _, err := os.Stat(c.dataDir); err == nil {
			return nil, fmt.Errorf("%s exists but holds no PostgreSQL cluster (no PG_VERSION); remove it or choose another Dir", c.dataDir)
		}
		c.log.Info("initialising cluster")
		return c.command(ctx, "initdb",
			"-D", building,
			"-U", "postgres",
			"--auth=trust",
			"-E", "UTF8",
			// The C locale exists everywhere; a missing LANG locale would
			// make initdb fail.
			"--no-locale",
			"--no-sync",
		), nil
	})
}

// buildDataDir makes Dir unless it already holds a cluster (kind, in the
// log and errors, names what it holds): build gives the command that
// writes a cluster into the directory it is given, Dir with .new
// appended, which is renamed into place once the command succeeds. A run
// killed halfway thus never leaves something that looks like a cluster,
// and the next run starts the half-built directory anew. op names the
// step in the errors of the command and the rename.
func (c *Cluster) buildDataDir(kind, op string, build func(building string) (*exec.Cmd, error)) error {
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		c.log.Debug("reusing existing " + kind)
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("inspect data directory: %w", err)
	}
	building := c.dataDir + ".new"
	cmd, err := build(building)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(building); err != nil {
		return fmt.Errorf("remove half-built %s: %w", kind, err)
	}
	if err := c.run(cmd); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := os.Rename(building, c.dataDir); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// clearLeftover deals with a postmaster.pid left by an earlier run: it
// stops the server if that run left it running, and deletes the file if
// its process is gone.
func (c *Cluster) clearLeftover(ctx context.Context) error {
	pidFile := filepath.Join(c.dataDir, "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("read %s: %w", pidFile, err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err == nil && pid > 0 && isPostgres(pid) {
		c.log.Warn("stopping a server an earlier run left running", "pid", pid)
		if err := c.pgctlStop(ctx, "fast"); err != nil {
			return fmt.Errorf("stop server left running (pid %d): %w", pid, err)
		}
		return nil
	}
	c.log.Info("removing stale postmaster.pid", "pid", first)
	if err := os.Remove(pidFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale %s: %w", pidFile, err)
	}
	return nil
}

// isPostgres reports whether process pid is alive and, where /proc tells,
// is a postgres process rather than an unrelated one that reused the pid.
// An exited process not yet reaped (a zombie) is not alive.
func isPostgres(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	if isZombie(pid) {
		return false
	}
	if runtime.GOOS != "linux" {
		return true
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return !errors.Is(err, fs.ErrNotExist)
	}
	return strings.TrimSpace(string(comm)) == "postgres"
}

// errPortInUse says the server could not bind its port.
var errPortInUse = errors.New("already in use by another process")

// pgctlStart starts the server on port and waits until it accepts
// connections.
func (c *Cluster) pgctlStart(ctx context.Context, port int, opts []string) error {
	logFile := filepath.Join(c.dir, "postgres.log")
	var logStart int64
	if fi, err := os.Stat(logFile); err == nil {
		logStart = fi.Size()
	}
	timeout := startTimeout
	if deadline, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(deadline))
	}
	cmd := c.command(ctx, "pg_ctl", "start",
		"-w",
		"-t", strconv.Itoa(max(1, int(timeout.Seconds()))),
		"-D", c.dataDir,
		"-l", logFile,
		"-o", fmt.Sprintf("-p %d %s", port, strings.Join(opts, " ")),
	)
	err := c.run(cmd)
	if err == nil {
		return nil
	}
	// Whatever got started must not outlive the failure.
	_ = c.pgctlStop(context.WithoutCancel(ctx), "immediate")

	serverLog := readFrom(logFile, logStart)
	if strings.Contains(serverLog, "Address already in use") {
		return fmt.Errorf("port %d on 127.0.0.1 is %w; choose another Port, or 0 to pick a free one", port, errPortInUse)
	}
	if serverLog != "" {
		return fmt.Errorf("%w\nserver log (%s):\n%s", err, logFile, serverLog)
	}
	return err
}

// pgctlStop stops the server if it is running and waits until it has
// exited.
func (c *Cluster) pgctlStop(ctx context.Context, mode string) error {
	if _, err := os.Stat(filepath.Join(c.dataDir, "postmaster.pid")); errors.Is(err, fs.ErrNotExist) {
		return nil // not running
	}
	return c.run(c.command(ctx, "pg_ctl", "stop", "-w", "-D", c.dataDir, "-m", mode))
}

// readFrom returns what file holds from offset on, at most its last 4 KiB.
func readFrom(file string, offset int64) string {
	f, err := os.Open(file)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size()-offset > 4096 {
		offset = fi.Size() - 4096
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return strings.TrimSpace(string(b))
}

// freePort returns a TCP port on 127.0.0.1 that nobody was listening on a
// moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// shellQuote quotes s for the shell that pg_ctl passes the server options
// through.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// reaperScript waits for its standard input to close, which happens when
// the process that started it exits or calls Stop, then stops the server
// at once (SIGQUIT, as pg_ctl stop -m immediate) and deletes the cluster
// directory. It runs as the caller's user, who owns, or as root can
// signal, the server.
const reaperScript = `
read -r line
pidfile="$1/postmaster.pid"
if [ -f "$pidfile" ]; then
	pid=$(head -n 1 "$pidfile")
	comm=$(cat "/proc/$pid/comm" 2>/dev/null || echo postgres)
	if [ -n "$pid" ] && [ "$comm" = postgres ] && kill -QUIT "$pid" 2>/dev/null; then
		i=0
		while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 300 ]; do
			sleep 0.1 2>/dev/null || sleep 1
			i=$((i + 1))
		done
	fi
fi
rm -rf "$2"
`

// reaperPipes keeps the write ends of the reaper pipes reachable, so that
// the garbage collector never closes one and kills a server in use.
var reaperPipes sync.Map

// startReaper starts the watcher of a Temporary cluster.
func (c *Cluster) startReaper() error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start cleanup watcher: %w", err)
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", reaperScript, "pgcluster-reaper", c.dataDir, c.dir)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("start cleanup watcher: %w", err)
	}
	reaperPipes.Store(w, struct{}{})
	c.reaper, c.reaperPipe = cmd, w
	return nil
}

// stopReaper makes the watcher clean up, and waits for it.
func (c *Cluster) stopReaper() {
	reaperPipes.Delete(c.reaperPipe)
	c.reaperPipe.Close()
	_ = c.reaper.Wait()
}
