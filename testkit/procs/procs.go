// Package procs supervises child processes: the simulator's --spawn and
// the stack test run the boxoffice binary's roles and NATS nodes with it.
// A process writes its output to one log file across restarts, and can be
// SIGKILLed, stopped gracefully and started again. FreePort hands out the
// loopback ports those processes listen on.
package procs

import (
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
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

	mu  sync.Mutex
	cmd *exec.Cmd
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
	p.cmd = cmd
	return nil
}

// Kill SIGKILLs the process (no shutdown, no flush) and waits until it is
// gone. It does nothing when the process was never started or has already
// been waited for; it fails when the process exited by itself since.
func (p *Proc) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.ProcessState != nil {
		return nil
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", p.spec.Name, err)
	}
	_ = p.cmd.Wait()
	return nil
}

// Stop sends SIGTERM, waits for the process to exit, and SIGKILLs it when
// it has not after StopGrace. It does nothing when the process was never
// started or has already been waited for.
func (p *Proc) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(StopGrace):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// Close closes the log file. Call it once the process is stopped; a later
// Start fails to write its output.
func (p *Proc) Close() error { return p.log.Close() }

// FreePort returns a loopback port nothing listens on, below the kernel's
// ephemeral range (usually 32768–60999): a port from ":0" can be taken by
// one of the stack's own outgoing connections between the check and the
// process binding it. A port is never handed out twice.
func FreePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := 20000 + mathrand.IntN(12000)
		if portsTaken[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		portsTaken[port] = true
		return port, nil
	}
	return 0, errors.New("free port: none free below the ephemeral range")
}

var (
	portsMu    sync.Mutex
	portsTaken = map[int]bool{}
)
