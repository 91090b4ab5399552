package lock

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"testing"

	"github.com/redis/go-redis/v9"

	"seckill/internal/testkit"
)

// testBackends gives the test the main Redis: the one REDIS_ADDR names,
// else a redis-server of the test's own, else miniredis (see
// testkit.RealRedis). Every strategy test keeps its shared counter there.
func testBackends(t *testing.T) Backends {
	t.Helper()
	return Backends{Redis: testkit.RealRedis(t).Client}
}

// strategyBackends is testBackends plus what the strategy name needs beyond
// the main Redis: independent nodes for redlock, a database for mysql.
func strategyBackends(t *testing.T, name string) Backends {
	t.Helper()
	b := testBackends(t)
	switch name {
	case "redlock":
		b.Nodes = testkit.RedisClients(testkit.RedisNodes(t, 3))
	case "mysql":
		b.SQL, _ = testMySQL(t)
		b.SQLDialect = "mysql"
	case "etcd":
		b.Etcd = testkit.ConnectEtcd(testkit.EtcdClient(t))
	}
	return b
}

// newLocker builds the strategy registered under name, failing the test if
// its backends are missing, and closes it when the test ends.
func newLocker(t *testing.T, name string, b Backends) Locker {
	t.Helper()
	l, err := New(name, b)
	if err != nil {
		t.Fatalf("New(%q): %v", name, err)
	}
	if c, ok := l.(io.Closer); ok {
		t.Cleanup(func() {
			if err := c.Close(); err != nil {
				t.Errorf("closing %s: %v", name, err)
			}
		})
	}
	return l
}

// newKey returns a key no other test uses, hash-tagged like the service's
// shard locks, and deletes it when the test ends.
func newKey(t *testing.T, rdb redis.UniversalClient) string {
	t.Helper()
	key := fmt.Sprintf("locktest:{%s}", rand.Text())
	t.Cleanup(func() {
		// t.Context() is already done during cleanup.
		if err := rdb.Del(context.Background(), key).Err(); err != nil {
			t.Errorf("deleting %s: %v", key, err)
		}
	})
	return key
}
