package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// process is a redis-server on a free loopback port, empty and without
// persistence, so that a restart is a node that lost its memory.
type process struct {
	port int
	dir  string // the server's working directory and log
	// extra are arguments beside the defaults (a cluster node's).
	extra []string

	cmd    *exec.Cmd
	exited chan struct{} // closed when the running process has exited
}

func startProcess(tb testing.TB) *Server {
	tb.Helper()
	// A free port can be taken by someone else between our probe and the
	// server's bind; a server that exits at once is tried on another port.
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("finding a free port: %v", err)
		}
		p := &process{port: port, dir: tb.TempDir()}
		s := &Server{kind: Process, addr: p.addr(), proc: p}
		tb.Cleanup(p.stop)
		s.Client = newClient(tb, s.addr)
		if lastErr = p.start(tb.Context(), s.Client); lastErr == nil {
			return s
		}
		if !errors.Is(lastErr, errExited) {
			break
		}
	}
	tb.Fatalf("starting redis-server: %v", lastErr)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (p *process) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

var errExited = errors.New("redis-server exited")

// start launches the server and waits until it answers PING on rdb.
func (p *process) start(ctx context.Context, rdb *redis.Client) error {
	log := filepath.Join(p.dir, "redis.log")
	args := append([]string{
		"--port", strconv.Itoa(p.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", p.dir, "--logfile", log}, p.extra...)
	p.cmd = exec.Command("redis-server", args...)
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	exited := make(chan struct{})
	p.exited = exited
	go func(cmd *exec.Cmd) {
		_ = cmd.Wait()
		close(exited)
	}(p.cmd)
	if err := waitReady(ctx, p.addr(), rdb, exited); err != nil {
		out, _ := os.ReadFile(log)
		return fmt.Errorf("redis-server on %s: %w\n%s", p.addr(), err, out)
	}
	return nil
}

// waitReady polls until the server at addr answers PING on rdb, or exited
// is closed (nil: never), or the deadline passes. It dials first, so that
// the client's pool does not log failed dials.
func waitReady(ctx context.Context, addr string, rdb *redis.Client, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			conn.Close()
			if err = rdb.Ping(ctx).Err(); err == nil {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("%w: %w", errExited, err)
		case <-ctx.Done():
			return fmt.Errorf("no PONG before the deadline: %w", err)
		case <-tick.C:
		}
	}
}

// stop kills the process, as a crash would, and waits until it has exited.
func (p *process) stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd = nil
}
