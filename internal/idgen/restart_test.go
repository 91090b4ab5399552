package idgen_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/idgen"
	"seckill/internal/testkit"
	"seckill/internal/testkit/child"
)

// TestRedisRestartedServers: a server that comes back with fewer draws
// than it made (a restart from an old snapshot, a replica promoted before
// it had its master's last draws) issues none of those ids again, through
// the generator's own guards only: Connected wired as the client's
// connection hook, and on a cluster the draws pinned to the master of the
// day key's slot. Each case draws "before" ids, loses the server's memory
// of the "lost" ones, and checks that none of the ids drawn "after" repeats
// any.
func TestRedisRestartedServers(t *testing.T) {
	t.Run("draws on a cluster", testClusterDraws)
	t.Run("one Redis back from a snapshot", func(t *testing.T) {
		if !testkit.HaveRedisServer() {
			testkit.Skip(t, testkit.NoRedisServer, "needs redis-server on PATH: the embedded Redis keeps no snapshot to come back from")
		}
		s := testkit.RedisNodes(t, 1)[0] // a process of the test's own: REDIS_ADDR's is not to be restarted
		var g *idgen.Redis
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), DialerRetries: 1, OnConnect: hook(&g)})
		t.Cleanup(func() { rdb.Close() })
		g = newGuarded(t, rdb)
		before := draw(t, g, 10)
		if err := s.Client.Save(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		lost := draw(t, g, 100)
		key := dayKeyOf(t, g)
		s.Restart(t) // SIGKILL, then a new process in the same directory: it loads the snapshot
		checkForgot(t, s.Client, key, lost)
		checkNoneAgain(t, before, lost, draw(t, g, 100))
	})
	t.Run("a cluster master back from a snapshot", func(t *testing.T) {
		c, _, g, key := guardedCluster(t)
		before := draw(t, g, 10)
		master, replica := masterAndReplica(t, c, key)
		// No replica to take over: the master comes back as itself.
		if err := c.Procs().Kill(replica); err != nil {
			t.Fatal(err)
		}
		m := redis.NewClient(&redis.Options{Addr: master})
		defer m.Close()
		if err := m.Save(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		lost := draw(t, g, 100)
		if err := c.Procs().Kill(master); err != nil {
			t.Fatal(err)
		}
		if err := c.Procs().Restart(t.Context(), master); err != nil {
			t.Fatal(err)
		}
		if err := child.WaitClusterOK(t.Context(), master); err != nil {
			t.Fatal(err)
		}
		checkForgot(t, c.Client, key, lost)
		checkNoneAgain(t, before, lost, drawThrough(t, g, 100))
	})
	t.Run("a cluster replica promoted without the last draws", func(t *testing.T) {
		c, cc, g, key := guardedCluster(t)
		before := draw(t, g, 10)
		master, replica := masterAndReplica(t, c, key)
		m := redis.NewClient(&redis.Options{Addr: master})
		defer m.Close()
		if n, err := m.Wait(t.Context(), 1, 5*time.Second).Result(); err != nil || n != 1 {
			t.Fatalf("WAIT 1: %d %v", n, err)
		}
		// The client holds connections to the replica made while it was
		// one (as a pool with idle connections does): no new connection,
		// no hook, when it becomes the master.
		connectTo(t, cc, replica)
		// The replica stalls; its master draws on, and dies before the
		// replica has those draws. A paused replica's socket still takes
		// what its master sends, up to the kernel's buffers: a write
		// larger than those goes first, so the draws stay in the master.
		if err := c.Procs().Pause(replica); err != nil {
			t.Fatal(err)
		}
		if err := m.Set(t.Context(), "{"+key+"}ballast", strings.Repeat("x", 32<<20), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		lost := draw(t, g, 100)
		if err := c.Procs().Kill(master); err != nil {
			t.Fatal(err)
		}
		if err := c.Procs().Resume(replica); err != nil {
			t.Fatal(err)
		}
		if err := child.WaitFailover(t.Context(), c.Addrs(), master); err != nil {
			t.Fatal(err)
		}
		checkForgot(t, c.Client, key, lost)
		checkNoneAgain(t, before, lost, drawThrough(t, g, 100))
	})
	t.Run("a manual failover", testManualFailover)
}

// testManualFailover: a replica that takes over by CLUSTER FAILOVER has
// its master's last draws (it waits for them), and the old master, alive,
// answers MOVED: draws go on, on the new master, none drawn again.
func testManualFailover(t *testing.T) {
	c, _, g, key := guardedCluster(t)
	before := draw(t, g, 10)
	master, replica := masterAndReplica(t, c, key)
	r := redis.NewClient(&redis.Options{Addr: replica})
	defer r.Close()
	if err := r.Do(t.Context(), "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatal(err)
	}
	if err := child.WaitFailover(t.Context(), c.Addrs(), master); err != nil {
		t.Fatal(err)
	}
	after := drawThrough(t, g, 100)
	checkNoneAgain(t, before, nil, after)
	seq, err := r.HGet(t.Context(), key, "seq").Uint64()
	if err != nil || seq < uint64(after[len(after)-1].Seq()) {
		t.Errorf("the new master %s holds seq %d (%v), not the last drawn %d", replica, seq, err, after[len(after)-1].Seq())
	}
}

// testClusterDraws: many goroutines at once draw distinct ids on a cluster
// (an embedded one on a bare machine), every draw on the day key's master.
func testClusterDraws(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	var g *idgen.Redis
	cc := c.NewClient(t, &redis.ClusterOptions{OnConnect: hook(&g)})
	g = newGuarded(t, cc)
	const goroutines, each = 16, 100
	var (
		mu   sync.Mutex
		seen = map[idgen.ID]bool{}
		wg   sync.WaitGroup
		gate = make(chan struct{})
	)
	for range goroutines {
		wg.Go(func() {
			<-gate
			for range each {
				id, err := g.Next(t.Context())
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[id] {
					t.Errorf("id %d drawn twice", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		})
	}
	close(gate)
	wg.Wait()
	if len(seen) != goroutines*each {
		t.Errorf("%d distinct ids, want %d", len(seen), goroutines*each)
	}
}

// hook is the connection hook of a client that *g draws on, once *g is set.
func hook(g **idgen.Redis) func(context.Context, *redis.Conn) error {
	return func(ctx context.Context, cn *redis.Conn) error {
		if *g == nil {
			return nil
		}
		return (*g).Connected(ctx, cn)
	}
}

// newGuarded returns a generator on rdb whose clock stands still: an id is
// its second and its seq, so a seq drawn again is an id told twice only in
// the second it was first drawn in — and the recovery takes seconds here,
// while a restart under systemd, or a second process whose clock is behind,
// takes none.
func newGuarded(t *testing.T, rdb idgen.RedisClient) *idgen.Redis {
	now := time.Now()
	g := idgen.NewRedis(rdb, "restart-test-"+rand.Text(), new(idgen.MemoryBlocks),
		idgen.WithClock(func() time.Time { return now }))
	t.Cleanup(g.Close)
	return g
}

// guardedCluster starts a cluster of the test's own and a generator on a
// client hooked to it; key is the generator's day key.
func guardedCluster(t *testing.T) (*testkit.RedisCluster, *redis.ClusterClient, *idgen.Redis, string) {
	if !testkit.HaveRedisServer() {
		testkit.Skip(t, testkit.NoRedisServer, "needs redis-server on PATH: miniredis neither fails over nor restarts from a snapshot")
	}
	c := testkit.ProcessRedisCluster(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the cluster's logs:\n%s", c.Procs().Logs(25))
		}
	})
	var g *idgen.Redis
	cc := c.NewClient(t, &redis.ClusterOptions{OnConnect: hook(&g), ClusterStateReloadInterval: time.Second})
	g = newGuarded(t, cc)
	s, err := g.Slot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return c, cc, g, s.DayKey
}

// connectTo makes cc hold a connection to the cluster node at addr
// (a replica: the client reaches it through its slot map, once the map
// lists it).
func connectTo(t *testing.T, cc *redis.ClusterClient, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var mu sync.Mutex
		reached := false
		err := cc.ForEachShard(t.Context(), func(ctx context.Context, n *redis.Client) error {
			mu.Lock()
			defer mu.Unlock()
			if n.Options().Addr == addr {
				reached = true
			}
			return n.Ping(ctx).Err()
		})
		if err == nil && reached {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client's slot map has no node %s: %v", addr, err)
		}
		cc.ReloadState(t.Context())
		time.Sleep(100 * time.Millisecond) // the poll interval
	}
}

// masterAndReplica returns the master that serves key and its replica (as
// the master's ROLE tells: a node's CLUSTER SLOTS may not list a replica
// yet, gossip reaching it later).
func masterAndReplica(t *testing.T, c *testkit.RedisCluster, key string) (string, string) {
	t.Helper()
	m, err := c.Client.MasterForKey(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	role, err := m.Do(t.Context(), "ROLE").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if len(role) == 3 {
		if replicas, ok := role[2].([]any); ok && len(replicas) == 1 {
			if r, ok := replicas[0].([]any); ok && len(r) >= 2 {
				return m.Options().Addr, net.JoinHostPort(fmt.Sprint(r[0]), fmt.Sprint(r[1]))
			}
		}
	}
	t.Fatalf("the master %s of %s has no replica: ROLE %v", m.Options().Addr, key, role)
	return "", ""
}

func draw(t *testing.T, g *idgen.Redis, n int) []idgen.ID {
	t.Helper()
	out := make([]idgen.ID, n)
	for i := range out {
		id, err := g.Next(t.Context())
		if err != nil {
			t.Fatalf("draw %d of %d: %v", i+1, n, err)
		}
		out[i] = id
	}
	return out
}

// drawThrough draws n ids while the cluster settles: a draw that fails (the
// node is down, the slot map is stale) is tried again, for up to 30 s.
func drawThrough(t *testing.T, g *idgen.Redis, n int) []idgen.ID {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	out := make([]idgen.ID, 0, n)
	var failed int
	for len(out) < n {
		id, err := g.Next(t.Context())
		if err != nil {
			if time.Now().After(deadline) || errors.Is(err, context.Canceled) {
				t.Fatalf("after %d ids and %d failed draws: %v", len(out), failed, err)
			}
			failed++
			time.Sleep(20 * time.Millisecond) // the poll interval
			continue
		}
		out = append(out, id)
	}
	t.Logf("%d draws failed while the cluster settled", failed)
	return out
}

func dayKeyOf(t *testing.T, g *idgen.Redis) string {
	t.Helper()
	s, err := g.Slot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return s.DayKey
}

// checkForgot stops the test unless the server behind rdb now holds a day
// seq below the lost ids': else the loss did not happen, and the ids
// drawn after would be new with or without the guards. It reads through
// rdb, a client without the generator's hook.
func checkForgot(t *testing.T, rdb redis.Cmdable, key string, lost []idgen.ID) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		seq, err := rdb.HGet(t.Context(), key, "seq").Uint64()
		if err == nil {
			if seq >= uint64(lost[0].Seq()) {
				t.Fatalf("the server holds seq %d, not below the lost %d: it forgot nothing", seq, lost[0].Seq())
			}
			t.Logf("the server holds seq %d; the lost draws were %d–%d", seq, lost[0].Seq(), lost[len(lost)-1].Seq())
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("reading the day's seq after the loss: %v", err)
		}
		if cc, ok := rdb.(*redis.ClusterClient); ok {
			cc.ReloadState(t.Context()) // it routes to a dead master until it reloads
		}
		time.Sleep(50 * time.Millisecond) // the poll interval
	}
}

// checkNoneAgain fails the test for each id of after that is among before
// or lost (the ids the server forgot it drew).
func checkNoneAgain(t *testing.T, before, lost, after []idgen.ID) {
	t.Helper()
	drawn := map[idgen.ID]string{}
	for _, id := range before {
		drawn[id] = "before"
	}
	for _, id := range lost {
		drawn[id] = "lost"
	}
	again := 0
	for _, id := range after {
		if what, ok := drawn[id]; ok {
			if again < 3 {
				t.Errorf("id %d (seq %d) drawn again; it was drawn %s", id, id.Seq(), what)
			}
			again++
		}
		drawn[id] = "after"
	}
	if again > 0 {
		t.Errorf("%d of %d ids drawn again", again, len(after))
	}
	t.Logf("seqs: before %d–%d, lost %d, after %d–%d", before[0].Seq(), before[len(before)-1].Seq(),
		len(lost), after[0].Seq(), after[len(after)-1].Seq())
}
