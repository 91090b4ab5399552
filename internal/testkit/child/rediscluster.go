package child

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/freeport"
)

// ClusterProcs is a Redis Cluster of redis-server processes on loopback:
// masters with a replica each, empty and without persistence. It needs no
// test: the load harness starts one too.
type ClusterProcs struct {
	mu    sync.Mutex
	nodes []*RedisProc
}

// ClusterSize is the number of processes of the cluster StartCluster
// starts: 3 masters and their replicas.
const ClusterSize = 6

// StartCluster starts a cluster of 3 masters with a replica each: see
// StartClusterOf.
func StartCluster(ctx context.Context, dir string) (*ClusterProcs, error) {
	return StartClusterOf(ctx, dir, ClusterSize/2)
}

// StartClusterOf starts 2×masters redis-server processes in cluster mode,
// each in a directory under dir, and makes a cluster of them with
// redis-cli --cluster create: masters masters (at least 3, as redis-cli
// asks), a replica each. Each node's port is at most 55535, so that its
// cluster bus port (port + 10000) is a valid port too.
func StartClusterOf(ctx context.Context, dir string, masters int) (_ *ClusterProcs, err error) {
	if masters < 3 {
		return nil, fmt.Errorf("a Redis Cluster needs at least 3 masters, not %d", masters)
	}
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("a Redis Cluster needs %s on PATH: %w", bin, err)
		}
	}
	c := &ClusterProcs{}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	for i := range 2 * masters {
		p, err := startClusterNode(ctx, filepath.Join(dir, "node"+strconv.Itoa(i)))
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, p)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	for _, addr := range c.Addrs() {
		if err := WaitClusterOK(ctx, addr); err != nil {
			return nil, err
		}
		if err := waitReplicaSynced(ctx, addr); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// waitReplicaSynced polls the node at addr until it is a replica whose
// link to its master is up, or a master that streams its writes to its
// replica: after a diskless full sync a master holds the writes back until
// the replica's first acknowledgement (up to a second later), and a master
// lost in that second takes them all with it.
func waitReplicaSynced(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return pollNode(ctx, addr, func(ctx context.Context, rdb *redis.Client) error {
		info, err := rdb.Info(ctx, "replication").Result()
		if err == nil && (strings.Contains(info, "master_link_status:up") || streaming(info)) {
			return nil
		}
		return fmt.Errorf("replica %s not in sync with its master before the deadline: %v %v", addr, err, info)
	})
}

// pollNode runs check on a client of the node at addr every 20ms until it
// returns nil, and returns check's last error once ctx is done: the wait
// loops of this file, each with its own check and its own words.
func pollNode(ctx context.Context, addr string, check func(context.Context, *redis.Client) error) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, MaxRetries: -1})
	defer rdb.Close()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check(ctx, rdb)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-tick.C:
		}
	}
}

func startClusterNode(ctx context.Context, dir string) (*RedisProc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	var lastErr error
	for range 10 {
		port, err := freeport.ClusterPort()
		if err != nil {
			return nil, err
		}
		p := &RedisProc{Port: port, Dir: dir, Extra: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			// A master lost is replaced by its replica after 2s: tests of
			// a failover wait that long, not the default 15s.
			"--cluster-node-timeout", "2000",
			// A replica's first full sync starts at once, not after the
			// default 5s wait for other replicas: until it is done, the
			// replica refuses to take over (its data is too old).
			"--repl-diskless-sync-delay", "0",
			// A master's replication offset, which waitReplicaSynced
			// waits to see acknowledged, moves with its first write or
			// its first PING to the replica: every second, not the
			// default 10s, so that an idle new cluster is ready in ~1s.
			"--repl-ping-replica-period", "1",
		}}
		_ = os.Remove(filepath.Join(dir, "nodes.conf"))
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), DialerRetries: 1})
		lastErr = p.Start(ctx, rdb)
		rdb.Close()
		if lastErr == nil {
			return p, nil
		}
		p.Stop()
		if !errors.Is(lastErr, ErrRedisExited) {
			break
		}
	}
	return nil, fmt.Errorf("starting a cluster node: %w", lastErr)
}

// WaitClusterOK polls the node at addr until it reports cluster_state:ok.
// Just after a node is lost the others still report ok until they agree it
// failed (the node timeout): see WaitFailover.
func WaitClusterOK(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return pollNode(ctx, addr, func(ctx context.Context, rdb *redis.Client) error {
		info, err := rdb.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		return fmt.Errorf("cluster node %s not ok before the deadline: %v %v", addr, err, info)
	})
}

// Addrs are the nodes' host:port.
func (c *ClusterProcs) Addrs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.nodes))
	for i, p := range c.nodes {
		out[i] = p.Addr()
	}
	return out
}

// Kill SIGKILLs the node at addr, as a crash would, and waits until it has
// exited. Its replica takes over its slots after the node timeout.
func (c *ClusterProcs) Kill(addr string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.nodes {
		if p.Addr() == addr {
			p.Stop()
			return nil
		}
	}
	return fmt.Errorf("no node of this cluster at %s", addr)
}

// Pause SIGSTOPs the node at addr, as a long GC or a VM stall would: it
// keeps its connections and answers nothing until Resume.
func (c *ClusterProcs) Pause(addr string) error { return c.signal(addr, syscall.SIGSTOP) }

// Resume SIGCONTs the node at addr, paused by Pause.
func (c *ClusterProcs) Resume(addr string) error { return c.signal(addr, syscall.SIGCONT) }

func (c *ClusterProcs) signal(addr string, sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.nodes {
		if p.Addr() == addr && p.cmd != nil {
			return p.cmd.Process.Signal(sig)
		}
	}
	return fmt.Errorf("no running node of this cluster at %s", addr)
}

// Restart starts again the node at addr, killed before, in its directory:
// it rejoins the cluster as itself (its nodes.conf), with the data of the
// dump.rdb a SAVE left there, if any — a server back from an old snapshot.
func (c *ClusterProcs) Restart(ctx context.Context, addr string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.nodes {
		if p.Addr() == addr && p.cmd == nil {
			rdb := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, MaxRetries: -1})
			defer rdb.Close()
			return p.Start(ctx, rdb)
		}
	}
	return fmt.Errorf("no stopped node of this cluster at %s", addr)
}

// streaming reports whether INFO replication of a master shows its replica
// online and acknowledging (an offset above 0).
func streaming(info string) bool {
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "slave0:") || !strings.Contains(line, "state=online") {
			continue
		}
		_, rest, _ := strings.Cut(line, "offset=")
		v, _, _ := strings.Cut(rest, ",")
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		return n > 0
	}
	return false
}

// WaitFailover polls every node of addrs but lost until each reports its
// cluster ok and no master at lost: a replica has taken over, and a client
// loading the slots from any living node is told so (gossip reaches the
// nodes one by one, so one node's view is not enough).
func WaitFailover(ctx context.Context, addrs []string, lost string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, addr := range addrs {
		if addr == lost {
			continue
		}
		if err := waitFailoverSeen(ctx, addr, lost); err != nil {
			return err
		}
	}
	return nil
}

func waitFailoverSeen(ctx context.Context, via, lost string) error {
	return pollNode(ctx, via, func(ctx context.Context, rdb *redis.Client) error {
		info, err := rdb.ClusterInfo(ctx).Result()
		slots, serr := rdb.ClusterSlots(ctx).Result()
		if err == nil && serr == nil && strings.Contains(info, "cluster_state:ok") && !servedBy(slots, lost) {
			return nil
		}
		return fmt.Errorf("no failover of %s seen from %s before the deadline: %v %v %v", lost, via, err, serr, info)
	})
}

func servedBy(slots []redis.ClusterSlot, addr string) bool {
	for _, s := range slots {
		if len(s.Nodes) > 0 && s.Nodes[0].Addr == addr {
			return true
		}
	}
	return false
}

// Logs returns the last lines of every node's log, to tell on a failure
// what the cluster did.
func (c *ClusterProcs) Logs(lines int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, p := range c.nodes {
		out, _ := os.ReadFile(filepath.Join(p.Dir, "redis.log"))
		ls := strings.Split(strings.TrimSpace(string(out)), "\n")
		fmt.Fprintf(&b, "--- %s\n%s\n", p.Addr(), strings.Join(ls[max(0, len(ls)-lines):], "\n"))
	}
	return b.String()
}

// Stop kills every node.
func (c *ClusterProcs) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.nodes {
		p.Stop()
	}
}

// Masters lists the masters' addresses as the cluster client sees them,
// each with the slot ranges it serves.
func Masters(ctx context.Context, cc *redis.ClusterClient) (map[string][][2]int64, error) {
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("reading the cluster's slots: %w", err)
	}
	out := make(map[string][][2]int64)
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		out[s.Nodes[0].Addr] = append(out[s.Nodes[0].Addr], [2]int64{int64(s.Start), int64(s.End)})
	}
	return out, nil
}

// EvenSlots splits the 16384 slots into one range per master, in order.
func EvenSlots(masters []string) []redis.ClusterSlot {
	const n = 16384
	out := make([]redis.ClusterSlot, len(masters))
	for i, addr := range masters {
		out[i] = redis.ClusterSlot{Start: i * n / len(masters), End: (i+1)*n/len(masters) - 1,
			Nodes: []redis.ClusterNode{{Addr: addr}}}
	}
	return out
}

// RedisProc is a redis-server on a free loopback port, empty and without
// persistence, so that a restart is a node that lost its memory.
type RedisProc struct {
	Port int
	Dir  string // the server's working directory and log
	// Extra are arguments beside the defaults (a cluster node's).
	Extra []string

	cmd    *exec.Cmd
	exited chan struct{} // closed when the running process has exited
}

func (p *RedisProc) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)) }

// ErrRedisExited is a redis-server that exited while it was awaited.
var ErrRedisExited = errors.New("redis-server exited")

// Start launches the server and waits until it answers PING on rdb.
func (p *RedisProc) Start(ctx context.Context, rdb *redis.Client) error {
	log := filepath.Join(p.Dir, "redis.log")
	args := append([]string{
		"--port", strconv.Itoa(p.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", p.Dir, "--logfile", log}, p.Extra...)
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
	if err := WaitRedisReady(ctx, p.Addr(), rdb, exited); err != nil {
		out, _ := os.ReadFile(log)
		return fmt.Errorf("redis-server on %s: %w\n%s", p.Addr(), err, out)
	}
	return nil
}

// WaitRedisReady polls until the server at addr answers PING on rdb, or exited
// is closed (nil: never), or the deadline passes. It dials first, so that
// the client's pool does not log failed dials.
func WaitRedisReady(ctx context.Context, addr string, rdb *redis.Client, exited <-chan struct{}) error {
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
			return fmt.Errorf("%w: %w", ErrRedisExited, err)
		case <-ctx.Done():
			return fmt.Errorf("no PONG before the deadline: %w", err)
		case <-tick.C:
		}
	}
}

// Stop kills the process, as a crash would, and waits until it has exited.
func (p *RedisProc) Stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	p.cmd = nil
}
