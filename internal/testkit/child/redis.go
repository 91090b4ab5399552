package child

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/embedded"
	"seckill/internal/freeport"
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
	// persistence is redis-server's: Persistence values.
	persistence string
}

// Persistence is how a redis-server of the parent's own keeps its data
// across a restart in its directory.
const (
	// NoPersistence: none; a restart starts empty (unless a SAVE left an
	// RDB file in the directory, which it loads).
	NoPersistence = "none"
	// AOFEverysec: an append-only file, fsynced once a second: a crash
	// loses up to about a second of writes.
	AOFEverysec = "everysec"
	// AOFAlways: an append-only file fsynced before each write is
	// answered: a crash loses no answered write.
	AOFAlways = "always"
)

// persistenceArgs are redis-server's arguments for persistence p.
func persistenceArgs(p, port string) ([]string, error) {
	switch p {
	case "", NoPersistence:
		return []string{"--appendonly", "no", "--appenddirname", "aof-" + port}, nil
	case AOFEverysec, AOFAlways:
		return []string{"--appendonly", "yes", "--appendfsync", p, "--appenddirname", "aof-" + port}, nil
	}
	return nil, fmt.Errorf("no Redis persistence %q (have %s, %s, %s)", p, NoPersistence, AOFEverysec, AOFAlways)
}

// SetPersistence switches a running redis-server to persistence p (CONFIG
// SET), waits for the rewrite of its append-only file to end, and keeps p
// for its restarts. The embedded Redis keeps nothing: an error.
func (r *Redis) SetPersistence(ctx context.Context, p string) error {
	if r.Kind != "redis-server" {
		return fmt.Errorf("the embedded Redis keeps no data across a restart: persistence %q needs redis-server on PATH", p)
	}
	_, port, _ := net.SplitHostPort(r.Addr)
	args, err := persistenceArgs(p, port)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	// appenddirname cannot change at run time; it is set at start.
	if err := rdb.ConfigSet(ctx, "appendonly", args[1]).Err(); err != nil {
		return fmt.Errorf("switching Redis to persistence %s: %w", p, err)
	}
	if len(args) > 4 {
		if err := rdb.ConfigSet(ctx, "appendfsync", args[3]).Err(); err != nil {
			return fmt.Errorf("switching Redis to persistence %s: %w", p, err)
		}
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := rdb.Info(ctx, "persistence").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "aof_rewrite_in_progress:1") && !strings.Contains(info, "aof_rewrite_scheduled:1") {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for Redis's AOF rewrite: %w", ctx.Err())
		case <-tick.C:
		}
	}
	r.persistence = p
	return nil
}

// StartRedis starts an empty Redis on a free loopback port: redis-server
// when it is on PATH, else exe (a binary that calls Run) serving the
// embedded one. dir holds redis-server's log.
func StartRedis(ctx context.Context, exe, dir string, stderr io.Writer) (*Redis, error) {
	return StartRedisWith(ctx, exe, dir, stderr, NoPersistence)
}

// StartRedisWith is StartRedis with a redis-server's persistence; any but
// NoPersistence needs redis-server on PATH.
func StartRedisWith(ctx context.Context, exe, dir string, stderr io.Writer, persistence string) (*Redis, error) {
	r := &Redis{exe: exe, dir: dir, stderr: stderr, Kind: "miniredis", persistence: persistence}
	if _, err := persistenceArgs(persistence, "0"); err != nil {
		return nil, err
	}
	// On a port of freeport's, not the kernel's: a restart binds it again.
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("redis-server"); err != nil && persistence != NoPersistence {
		return nil, fmt.Errorf("persistence %s needs redis-server on PATH: %w", persistence, err)
	} else if err == nil {
		r.Kind = "redis-server"
	}
	if err := r.start(ctx, addr); err != nil {
		return nil, err
	}
	return r, nil
}

// FreePort is a loopback TCP port free when it returns: see freeport.
func FreePort() (int, error) { return freeport.Port() }

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
	persist, err := persistenceArgs(r.persistence, port)
	if err != nil {
		return err
	}
	args := append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--daemonize", "no",
		"--dir", r.dir, "--dbfilename", "dump-" + port + ".rdb",
		"--logfile", filepath.Join(r.dir, "redis-"+port+".log")}, persist...)
	r.Process, _, err = start(ctx, "redis-server", args, r.stderr, "", attr)
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

// Restart kills the server (SIGKILL) and starts it again on the same
// address and directory, as a Redis that crashed and came back: empty
// without persistence, with what its append-only file kept otherwise.
func (r *Redis) Restart(ctx context.Context) error {
	r.Kill()
	return r.Start(ctx)
}

// Start starts a killed server again on its address and directory: a
// Restart in two steps, for a test that acts while the server is down.
func (r *Redis) Start(ctx context.Context) error { return r.start(ctx, r.Addr) }

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
