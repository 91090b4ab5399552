package child

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/embedded"
)

// RedisFlag is the hidden first argument that makes a binary an embedded
// Redis on the address that follows it.
const RedisFlag = "-serve-redis"

// Redis is a Redis server of the parent's own, in a process of its own:
// redis-server when it is on PATH, else the parent's binary serving the
// embedded one. Either may be paused, killed and restarted empty.
type Redis struct {
	*Process
	Addr string
	// Kind is "redis-server" or "miniredis".
	Kind string

	exe    string // the binary serving miniredis
	dir    string // redis-server's working directory
	stderr io.Writer
}

// StartRedis starts an empty Redis on a free loopback port: redis-server
// when it is on PATH, else exe (a binary that calls Run) serving the
// embedded one. dir holds redis-server's log.
func StartRedis(ctx context.Context, exe, dir string, stderr io.Writer) (*Redis, error) {
	r := &Redis{exe: exe, dir: dir, stderr: stderr, Kind: "miniredis"}
	addr := "127.0.0.1:0"
	if _, err := exec.LookPath("redis-server"); err == nil {
		r.Kind = "redis-server"
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	if err := r.start(ctx, addr); err != nil {
		return nil, err
	}
	return r, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (r *Redis) start(ctx context.Context, addr string) error {
	var err error
	if r.Kind == "miniredis" {
		r.Process, r.Addr, err = start(ctx, r.exe, []string{RedisFlag, addr}, r.stderr, listening, nil)
		if err != nil {
			return fmt.Errorf("starting the embedded Redis in a process of its own: %w", err)
		}
		return nil
	}
	_, port, _ := net.SplitHostPort(addr)
	r.Addr = addr
	// Killed with its parent: redis-server does not watch its stdin.
	attr := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r.Process, _, err = start(ctx, "redis-server", []string{"--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", r.dir, "--logfile", filepath.Join(r.dir, "redis-"+port+".log")}, r.stderr, "", attr)
	if err != nil {
		return err
	}
	if err := waitReady(ctx, addr, r.exited); err != nil {
		r.Kill()
		log, _ := os.ReadFile(filepath.Join(r.dir, "redis-"+port+".log"))
		return fmt.Errorf("redis-server on %s: %w\n%s", addr, err, log)
	}
	return nil
}

// Restart kills the server and starts an empty one on the same address, as
// a Redis without persistence that crashed and came back.
func (r *Redis) Restart(ctx context.Context) error {
	r.Kill()
	return r.start(ctx, r.Addr)
}

// waitReady polls until the server at addr answers PING, or exited closes.
func waitReady(ctx context.Context, addr string, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, MaxRetries: -1})
	defer rdb.Close()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		err := rdb.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("exited: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("no PONG before the deadline: %w", err)
		case <-tick.C:
		}
	}
}

// serveRedis is the embedded Redis's side: it serves on addr, prints the
// address, and serves until its stdin closes.
func serveRedis(addr string, stdin io.Reader, stdout io.Writer) error {
	r, err := embedded.StartRedisAt(addr)
	if err != nil {
		return err
	}
	defer r.Close()
	fmt.Fprintln(stdout, listening+r.Addr())
	<-awaitParent(stdin)
	return nil
}
