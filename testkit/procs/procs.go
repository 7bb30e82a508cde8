// Package procs supervises child processes: the simulator's --spawn, the
// game day and the stack test run the boxoffice binary's roles and NATS
// nodes with it. A process writes its output to one log file across
// restarts, and can be SIGKILLed, stopped gracefully and started again;
// WaitHTTP waits until it is ready and gives up at once, with the end of
// its log, when it exits first. FreePort hands out the loopback ports those
// processes listen on, never one that another process using FreePort has
// handed out.
package procs

import (
	"context"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StopGrace is how long Stop waits after SIGTERM before it SIGKILLs.
const StopGrace = 15 * time.Second

// Spec is what a Proc runs.
type Spec struct {
	// Name names the process in errors.
	Name string
	// Bin is the executable; Args its arguments (without argv[0]).
	Bin  string
	Args []string
	// Env is the whole environment. Nil inherits the supervisor's, as
	// with exec.Cmd.
	Env []string
	// LogPath is the file stdout and stderr go to. New truncates it; every
	// start after the first appends to it.
	LogPath string
	// OwnGroup starts the process in a process group of its own, so a
	// signal to the supervisor's group (Ctrl-C in a terminal) does not
	// reach it: only Kill and Stop do.
	OwnGroup bool
}

// Proc is one supervised process. Its methods may be called from any
// goroutine; they are serialized.
type Proc struct {
	spec Spec
	log  *os.File

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once the last start's process has exited
}

// New creates (or truncates) the process's log file. It does not start
// the process.
func New(spec Spec) (*Proc, error) {
	f, err := os.Create(spec.LogPath)
	if err != nil {
		return nil, fmt.Errorf("log of %s: %w", spec.Name, err)
	}
	return &Proc{spec: spec, log: f}, nil
}

// Name is the process's name from its Spec.
func (p *Proc) Name() string { return p.spec.Name }

// LogPath is the file the process writes its output to.
func (p *Proc) LogPath() string { return p.spec.LogPath }

// Pid is the process id of the last start, 0 before the first.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Start starts the process, the first time or again after Kill or Stop;
// its output goes on after what the earlier runs wrote. It does not check
// that a previous run has ended.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.spec.Bin, p.spec.Args...)
	cmd.Env = p.spec.Env
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if p.spec.OwnGroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", p.spec.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

// Exited reports whether the last start's process has exited (by itself,
// or by Kill or Stop). It is false before the first start.
func (p *Proc) Exited() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	return done != nil && isClosed(done)
}

// LogTail is the last n lines the process has written, across its starts.
func (p *Proc) LogTail(n int) string {
	raw, err := os.ReadFile(p.spec.LogPath)
	if err != nil {
		return fmt.Sprintf("(log of %s: %v)", p.spec.Name, err)
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// WaitHTTP waits until url answers 2xx, polling every 200 ms. It gives up
// with an error that ends with p's last log lines when p exits first (a
// port taken, a bad setting: waiting out the timeout would only hide why)
// or when timeout passes.
func WaitHTTP(ctx context.Context, p *Proc, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("wait for %s: %w", url, err)
		}
		if res, err := c.Do(req); err == nil {
			res.Body.Close()
			if res.StatusCode >= 200 && res.StatusCode < 300 {
				return nil
			}
		}
		if p.Exited() {
			return fmt.Errorf("%s exited before %s answered; its log ends:\n%s", p.spec.Name, url, p.LogTail(logTailLines))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %s not ready after %s; its log ends:\n%s", p.spec.Name, url, timeout, p.LogTail(logTailLines))
		case <-tick.C:
		}
	}
}

// logTailLines is how much of a process's log WaitHTTP's errors carry.
const logTailLines = 8

// Kill SIGKILLs the process (no shutdown, no flush) and waits until it is
// gone. It does nothing when the process was never started or has exited.
func (p *Proc) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.spec.Name, err)
	}
	<-p.done
	return nil
}

// Stop sends SIGTERM, waits for the process to exit, and SIGKILLs it when
// it has not after StopGrace. It does nothing when the process was never
// started or has exited.
func (p *Proc) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || isClosed(p.done) {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(StopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Close closes the log file. Call it once the process is stopped; a later
// Start fails to write its output.
func (p *Proc) Close() error { return p.log.Close() }

// FreePort returns a loopback port nothing listens on, never one it has
// handed out before, and never one another process using FreePort holds.
//
// The port is checked free and then closed, so whatever takes it before
// the caller's child binds it makes that child fail. Two things could:
//   - one of the stack's own outgoing connections, which take ports from
//     the kernel's ephemeral range (usually 32768–60999): the ports here
//     are below it;
//   - another process handing out ports the same way (two simulators, two
//     test binaries of `go test ./...`): each process hands out ports from
//     a block of its own, which it owns for its lifetime by listening on
//     the block's first port, as HashiCorp's freeport does. A process that
//     finds that port taken tries another block.
func FreePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for {
		for portsNext < portsEnd {
			port := portsNext
			portsNext++
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				continue
			}
			ln.Close()
			return port, nil
		}
		if err := reserveBlock(); err != nil {
			return 0, err
		}
	}
}

const (
	portsLow      = 20000 // the blocks span [portsLow, portsHigh),
	portsHigh     = 32000 // below the kernel's ephemeral range
	portsPerBlock = 100   // the first is the block's lock
)

var (
	portsMu              sync.Mutex
	portsNext, portsEnd  int            // what is left of the current block
	portsLocks           []net.Listener // held open for the process's lifetime
	errNoFreePortsBlocks = errors.New("free port: every block below the ephemeral range is taken")
)

// reserveBlock makes a free block the current one. Call with portsMu held.
func reserveBlock() error {
	for _, b := range mathrand.Perm((portsHigh - portsLow) / portsPerBlock) {
		first := portsLow + b*portsPerBlock
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", first))
		if err != nil {
			continue // another process's block, or something else's port
		}
		portsLocks = append(portsLocks, ln)
		portsNext, portsEnd = first+1, first+portsPerBlock
		return nil
	}
	return errNoFreePortsBlocks
}
