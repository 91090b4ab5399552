package testkit_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/testkit"
	"seckill/internal/testkit/child"
)

// TestCluster checks that a cluster's keys spread over its three masters:
// the client, given only the nodes' addresses, routes each key to the node
// of its slot; and that each node says, as the service checks, that its
// cluster is ok.
func TestCluster(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	ctx := t.Context()
	for _, addr := range c.Addrs() {
		node := redis.NewClient(&redis.Options{Addr: addr})
		info, err := node.ClusterInfo(ctx).Result()
		node.Close()
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			t.Errorf("CLUSTER INFO on %s (%s): %q %v, want cluster_state:ok", addr, c.Kind(), info, err)
		}
	}
	const keys = 30
	for i := range keys {
		if err := c.Client.Set(ctx, "redistest:{k"+strconv.Itoa(i)+"}", i, 0).Err(); err != nil {
			t.Fatalf("SET on the cluster: %v", err)
		}
	}
	var (
		mu     sync.Mutex
		counts = map[string]int64{}
	)
	err := c.Client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.Eval(ctx, "return #redis.call('KEYS', 'redistest:*')", nil).Int64()
		mu.Lock()
		counts[m.Options().Addr] = n
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatalf("counting keys per master: %v", err)
	}
	var total int64
	for addr, n := range counts {
		if n == 0 {
			t.Errorf("master %s holds none of the %d keys: %v", addr, keys, counts)
		}
		total += n
	}
	if len(counts) != 3 || total != keys {
		t.Errorf("keys per master %v, want %d over 3 masters", counts, keys)
	}
	t.Run("failover", testFailover)
}

// testFailover: a master SIGKILLed is replaced by its replica, which holds
// what the master had replicated.
func testFailover(t *testing.T) {
	if !testkit.HaveRedisServer() {
		testkit.Skip(t, testkit.NoRedisServer, "needs redis-server on PATH: miniredis has no replicas")
	}
	c := testkit.ProcessRedisCluster(t)
	ctx := t.Context()
	const key = "redistest:{failover}"
	if err := c.Client.Set(ctx, key, "kept", 0).Err(); err != nil {
		t.Fatal(err)
	}
	master, err := c.Client.MasterForKey(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// WAIT: the replica has the key before its master dies.
	if n, err := master.Wait(ctx, 1, 5e9).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d %v", n, err)
	}
	victim := master.Options().Addr
	if err := c.Procs().Kill(victim); err != nil {
		t.Fatal(err)
	}
	if err := child.WaitFailover(ctx, c.Addrs(), victim); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := c.Client.Get(ctx, key).Result()
		if err == nil {
			if v != "kept" {
				t.Fatalf("after the failover %s holds %q", key, v)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the failover: %v", err)
		}
		// The client learns the new slots only when it reloads them (at
		// most every 200 ms); a reload may have run before every node knew.
		c.Client.ReloadState(ctx)
		time.Sleep(20 * time.Millisecond) // the poll interval
	}
}
