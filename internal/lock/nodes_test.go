package lock

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

// redisNode is a redis-server process of the test's own, on a free loopback
// port, which the test may stop and start again (empty: no persistence, like
// a node that lost its memory in a crash).
type redisNode struct {
	port   int
	dir    string // the server's working directory and log
	Client *redis.Client

	cmd    *exec.Cmd
	exited chan struct{} // closed when the running process has exited
}

// startNodes starts n independent redis-servers and stops them when the test
// ends. It skips the test when redis-server is not on PATH.
func startNodes(tb testing.TB, n int) []*redisNode {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		tb.Skip("redis-server is not on PATH: cannot start independent Redis nodes")
	}
	nodes := make([]*redisNode, n)
	for i := range nodes {
		nodes[i] = startNode(tb)
	}
	return nodes
}

// nodeClients returns the nodes' clients, for Backends.Nodes.
func nodeClients(nodes []*redisNode) []*redis.Client {
	cs := make([]*redis.Client, len(nodes))
	for i, n := range nodes {
		cs[i] = n.Client
	}
	return cs
}

func startNode(tb testing.TB) *redisNode {
	tb.Helper()
	// A free port can be taken by someone else between our probe and the
	// server's bind; a server that exits at once is tried on another port.
	var lastErr error
	for range 5 {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("finding a free port: %v", err)
		}
		n := &redisNode{port: port, dir: tb.TempDir()}
		// One dial attempt: a stopped node should fail at once, not after
		// the pool's retries (which log) outlive the test.
		n.Client = redis.NewClient(&redis.Options{Addr: n.addr(), DialerRetries: 1})
		tb.Cleanup(func() {
			n.Client.Close()
			n.stop()
		})
		if lastErr = n.start(tb.Context()); lastErr == nil {
			return n
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

func (n *redisNode) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

var errExited = errors.New("redis-server exited")

// start launches the server and waits until it answers PING.
func (n *redisNode) start(ctx context.Context) error {
	log := filepath.Join(n.dir, "redis.log")
	n.cmd = exec.Command("redis-server",
		"--port", strconv.Itoa(n.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", n.dir, "--logfile", log)
	if err := n.cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	exited := make(chan struct{})
	n.exited = exited
	go func(cmd *exec.Cmd) {
		_ = cmd.Wait()
		close(exited)
	}(n.cmd)
	if err := n.waitReady(ctx); err != nil {
		out, _ := os.ReadFile(log)
		return fmt.Errorf("redis-server on %s: %w\n%s", n.addr(), err, out)
	}
	return nil
}

// waitReady polls until the server answers PING or the deadline passes. It
// dials first, so that the client's pool does not log failed dials.
func (n *redisNode) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", n.addr())
		if err == nil {
			conn.Close()
			if err = n.Client.Ping(ctx).Err(); err == nil {
				return nil
			}
		}
		select {
		case <-n.exited:
			return fmt.Errorf("%w: %w", errExited, err)
		case <-ctx.Done():
			return fmt.Errorf("no PONG before the deadline: %w", err)
		case <-tick.C:
		}
	}
}

// stop kills the process (as a crash would) and waits until it has exited.
func (n *redisNode) stop() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.exited
	n.cmd = nil
}

// Stop kills the node's server; its client then fails to connect.
func (n *redisNode) Stop(tb testing.TB) {
	tb.Helper()
	n.stop()
}

// Restart starts a fresh, empty server on the node's port and waits until it
// answers.
func (n *redisNode) Restart(tb testing.TB) {
	tb.Helper()
	n.stop()
	if err := n.start(tb.Context()); err != nil {
		tb.Fatalf("restarting: %v", err)
	}
}
