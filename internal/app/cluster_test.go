package app

import (
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"seckill/internal/testkit"
)

func clusterConfig(t *testing.T, nodes ...string) Config {
	t.Helper()
	cfg, _, err := ParseConfig("seckill", nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.RedisCluster, cfg.DemoStock, cfg.ReconcileEvery = nodes, 0, 0
	return cfg
}

// TestOpenCluster: the service refuses a cluster it cannot use, naming the
// node, and runs on one it can.
func TestOpenCluster(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Run("a node that does not answer", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		dead := l.Addr().String()
		l.Close()
		_, err = Open(t.Context(), clusterConfig(t, dead), quiet, Extras{})
		if err == nil || !strings.Contains(err.Error(), dead) {
			t.Fatalf("Open on a dead node: %v, want an error naming %s", err, dead)
		}
	})
	t.Run("a node not in cluster mode", func(t *testing.T) {
		plain := testkit.RealRedis(t)
		_, err := Open(t.Context(), clusterConfig(t, plain.Addr()), quiet, Extras{})
		if err == nil || !strings.Contains(err.Error(), plain.Addr()) || !strings.Contains(err.Error(), "not in cluster mode") {
			t.Fatalf("Open on a plain Redis: %v, want an error naming %s as not in cluster mode", err, plain.Addr())
		}
	})
	t.Run("a cluster", func(t *testing.T) {
		c := testkit.NewRedisCluster(t)
		a, err := Open(t.Context(), clusterConfig(t, c.Addrs()[0]), quiet, Extras{})
		if err != nil {
			t.Fatalf("Open on a cluster: %v", err)
		}
		defer a.Close()
		if _, ok := a.Redis().(*redis.ClusterClient); !ok {
			t.Errorf("the service's Redis is a %T, want a *redis.ClusterClient", a.Redis())
		}
		if h, err := a.health(t.Context()); err != nil || h.Status != "ok" {
			t.Errorf("health on a cluster: %+v %v", h, err)
		}
	})
}
