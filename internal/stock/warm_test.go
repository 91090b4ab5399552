package stock_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"seckill/internal/stock"
	"seckill/internal/testkit"
)

// TestLoadScriptsOnEveryMaster: on a cluster of the test's own, whose
// masters forgot their scripts (SCRIPT FLUSH), LoadScripts loads the take
// on every master, where a shard's take may run.
func TestLoadScriptsOnEveryMaster(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	if c.Kind() == testkit.RedisExternal {
		t.Skip("REDIS_CLUSTER is shared: this test flushes its masters' scripts")
	}
	each := func(what string, fn func(ctx context.Context, m *redis.Client) error) {
		t.Helper()
		if err := c.Client.ForEachMaster(t.Context(), fn); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	each("flushing the scripts", func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() })
	if err := stock.NewStore(c.Client, nil).LoadScripts(t.Context()); err != nil {
		t.Fatal(err)
	}
	var masters atomic.Int32 // ForEachMaster asks them at once
	each("asking for the take", func(ctx context.Context, m *redis.Client) error {
		ok, err := m.ScriptExists(ctx, stock.TakeScript().Hash()).Result()
		if err == nil && !ok[0] {
			t.Errorf("master %s has no take script", m.Options().Addr)
		}
		masters.Add(1)
		return err
	})
	if n := masters.Load(); n < 2 {
		t.Errorf("%d masters, want a cluster of several", n)
	}
}
