// Package child runs the service's processes as children of the harness or
// of a test — service instances, and a Redis — so that a whole process can
// be paused (SIGSTOP, as a frozen VM or a long GC pause would), resumed,
// killed (SIGKILL, as a crash would) and, for Redis, restarted empty. The
// children are the running binary re-executed with a hidden first argument
// (see Run), or redis-server when it is on PATH.
package child

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// StartTimeout bounds a child's start-up.
const StartTimeout = 30 * time.Second

// Process is a child process.
type Process struct {
	cmd    *exec.Cmd
	stdin  io.Closer     // closed by Stop: a child of ours then exits
	exited chan struct{} // closed once the process has exited and was waited for
}

// start runs exe with args and waits, within StartTimeout, for the line it
// prints on stdout starting with prefix; it returns the rest of that line.
// A nil prefix waits for nothing.
func start(ctx context.Context, exe string, args []string, stderr io.Writer, prefix string, attr *syscall.SysProcAttr) (*Process, string, error) {
	cmd := exec.Command(exe, args...)
	cmd.Stderr = stderr
	cmd.SysProcAttr = attr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("starting %s: %w", exe, err)
	}
	p := &Process{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	type line struct {
		s   string
		err error
	}
	got := make(chan line, 1)
	go func() {
		// Reads the first line, then drains stdout until the child closes
		// it; cmd.Wait below waits for this copy to end.
		r := bufio.NewReader(stdout)
		s, err := r.ReadString('\n')
		got <- line{s, err}
		_, _ = io.Copy(io.Discard, r)
	}()
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	if prefix == "" {
		return p, "", nil
	}
	timer := time.NewTimer(StartTimeout)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		p.Kill()
		return nil, "", ctx.Err()
	case <-timer.C:
		p.Kill()
		return nil, "", fmt.Errorf("%s printed nothing within %s", exe, StartTimeout)
	case l := <-got:
		rest, ok := strings.CutPrefix(strings.TrimSpace(l.s), prefix)
		if !ok {
			p.Kill()
			return nil, "", fmt.Errorf("%s exited before it was ready (%q, %v)", exe, l.s, l.err)
		}
		return p, rest, nil
	}
}

// Pid is the child's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Pause stops the whole process (SIGSTOP) and returns once it is stopped:
// its threads, timers and connections freeze while the kernel keeps its
// sockets open.
func (p *Process) Pause() error {
	return Freeze(p.cmd.Process)
}

// Resume continues a paused process (SIGCONT).
func (p *Process) Resume() error {
	return Thaw(p.cmd.Process)
}

// PauseFor pauses the process for d, then resumes it, unless ctx ends first
// (it is resumed then too).
func (p *Process) PauseFor(ctx context.Context, d time.Duration) error {
	if err := p.Pause(); err != nil {
		return err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return p.Resume()
}

// Kill ends the process at once (SIGKILL), as a crash would, and waits
// until it has exited. Killing an exited process does nothing.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Exited is closed once the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Stop asks the process to end (its stdin closed, SIGTERM, and SIGCONT in
// case it is paused) and waits for it; after grace it kills it, and says so.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	p.stdin.Close()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return nil
	case <-t.C:
		p.Kill()
		return fmt.Errorf("process %d did not stop within %s: killed", p.Pid(), grace)
	}
}

// Run runs this process as the child args ask for, if they do: args[1] is
// ServeFlag (a service instance, started by start), RedisFlag (an embedded
// Redis) or EtcdFlag (an etcd member). It reports whether they did, and the
// child's error. A binary that starts children calls it first thing, in main
// or TestMain.
func Run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer, start StartService) (bool, error) {
	if len(args) < 2 {
		return false, nil
	}
	switch args[1] {
	case ServeFlag:
		return true, serve(ctx, start, args[2:], getenv, stdin, stdout, stderr)
	case RedisFlag:
		if len(args) != 3 {
			return true, errors.New(RedisFlag + " takes one argument, the address")
		}
		return true, serveRedis(args[2], stdin, stdout)
	case EtcdFlag:
		if len(args) != 3 {
			return true, errors.New(EtcdFlag + " takes one argument, the member")
		}
		return true, serveEtcd(args[2], stdin)
	}
	return false, nil
}

// Main is the entry point of a binary that starts children of itself,
// typically a test binary's TestMain (child.Main(m.Run, start)): it runs the
// child its arguments ask for and exits, or else exits with run's status.
func Main(run func() int, start StartService) {
	if ok, err := Run(context.Background(), os.Args, os.Getenv, os.Stdin, os.Stdout, os.Stderr, start); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(run())
}

// awaitParent returns a channel closed when stdin closes: the parent closed
// it, or exited.
func awaitParent(stdin io.Reader) <-chan struct{} {
	gone := make(chan struct{})
	go func() { // returns when stdin closes, which also happens when this process exits
		_, _ = io.Copy(io.Discard, stdin)
		close(gone)
	}()
	return gone
}
