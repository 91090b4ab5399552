package testkit

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestKeysExpireInRealTime: on every kind of server, a key's TTL runs out
// on the wall clock, with nobody moving a clock by hand.
func TestKeysExpireInRealTime(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(testing.TB) *RedisServer
	}{{"NewRedis", NewRedis}, {"RealRedis", RealRedis}, {"RedisNodes", func(tb testing.TB) *RedisServer { return RedisNodes(tb, 1)[0] }}} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start(t)
			t.Logf("on %v at %s", s.Kind(), s.Addr())
			key := "redistest:" + t.Name()
			t.Cleanup(func() { s.Client.Del(t.Context(), key) })
			if err := s.Client.Set(t.Context(), key, 1, 50*time.Millisecond).Err(); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for s.Client.Exists(t.Context(), key).Val() == 1 {
				if time.Now().After(deadline) {
					t.Fatalf("%s still exists 5s after its TTL of 50ms", key)
				}
				time.Sleep(5 * time.Millisecond) // the poll interval
			}
		})
	}
}

// TestNodeStopRestart: a stopped node refuses its client; a restarted one
// answers on the same address, empty.
func TestNodeStopRestart(t *testing.T) {
	n := RedisNodes(t, 1)[0]
	t.Logf("on %v", n.Kind())
	ctx := t.Context()
	if err := n.Client.Set(ctx, "k", 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	n.Stop(t)
	if err := n.Client.Ping(ctx).Err(); err == nil {
		t.Fatal("a stopped node answered PING")
	}
	addr := n.Addr()
	n.Restart(t)
	if n.Addr() != addr {
		t.Errorf("restarted on %s, was %s", n.Addr(), addr)
	}
	if err := n.Client.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET k after the restart = %v; want redis.Nil: an empty server", err)
	}
}
