package lock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"

	"github.com/redis/go-redis/v9"
)

// testBackends connects to the servers the environment names and closes
// them when the test ends. It skips the test without REDIS_ADDR: every
// strategy test keeps its shared counter there. Backends a strategy needs
// beyond the main Redis (Nodes, SQL) are added here when their variables are
// set; a strategy whose backends are missing refuses with ErrUnsupported and
// newLocker skips.
func testBackends(t *testing.T) Backends {
	t.Helper()
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		t.Skip("REDIS_ADDR is not set: these tests need a real Redis (e.g. REDIS_ADDR=127.0.0.1:6379)")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	b := Backends{Redis: rdb}
	if _, err := exec.LookPath("redis-server"); err == nil {
		b.Nodes = nodeClients(startNodes(t, 3)) // for redlock
	}
	if os.Getenv("MYSQL_DSN") != "" {
		b.SQL, _ = testMySQL(t) // for mysql
		b.SQLDialect = "mysql"
	}
	return b
}

// newLocker builds the strategy registered under name, skipping the test if
// its backends are missing, and closes it when the test ends.
func newLocker(t *testing.T, name string, b Backends) Locker {
	t.Helper()
	l, err := New(name, b)
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("%s: %v", name, err)
	}
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
func newKey(t *testing.T, rdb *redis.Client) string {
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
