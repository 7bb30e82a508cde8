package main

import (
	"os"
	"os/exec"
	"sync"
	"time"
)

// child is a process the lab started (a benchmark part, an API under
// test) and stops when done with it.
type child struct {
	cmd  *exec.Cmd
	once sync.Once
	// done is closed when the process has exited (once wait was called),
	// with err its end.
	done chan struct{}
	err  error
}

// newChild is the child of cmd, which the caller starts.
func newChild(cmd *exec.Cmd) child {
	return child{cmd: cmd, done: make(chan struct{})}
}

// wait waits for the started process in the background, closing done
// when it exits. Call it once the process's output pipes need no more
// reading by the caller's start-up (exec.Cmd.Wait closes them).
func (c *child) wait() {
	go func() { c.err = c.cmd.Wait(); close(c.done) }()
}

// end sends the process sig and waits for it to exit, killing it after
// grace. Only the first call acts; later ones return at once.
func (c *child) end(sig os.Signal, grace time.Duration) {
	c.once.Do(func() {
		_ = c.cmd.Process.Signal(sig)
		select {
		case <-c.done:
		case <-time.After(grace):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
}
