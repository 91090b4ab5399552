package testkit

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/embedded"
	"seckill/internal/testkit/child"
)

// RedisCluster is a Redis Cluster a test uses: the one REDIS_CLUSTER names, or
// six redis-server processes of the test's own (3 masters, a replica each),
// or, with no redis-server on PATH, three miniredis nodes with the slot map
// given to the client (ClusterOptions.ClusterSlots), so that keys are
// routed over three servers as on a cluster.
//
// miniredis does not refuse a script whose keys span slots (CROSSSLOT),
// nor fail over: tests of those need RedisKind() == RedisProcess.
type RedisCluster struct {
	// Client is a cluster client on every node, closed when the test ends.
	Client *redis.ClusterClient

	kind  RedisKind
	procs *child.ClusterProcs // RedisProcess
	emb   []*embedded.Redis   // RedisEmbedded, the masters in slot order
	addrs []string
	opt   redis.ClusterOptions // what reaches the nodes: Addrs, or the embedded slot map
}

// NewRedisCluster returns the cluster REDIS_CLUSTER names, or else one of the
// test's own, on redis-server processes when it is on PATH, else on
// miniredis.
func NewRedisCluster(tb testing.TB) *RedisCluster {
	tb.Helper()
	if env := os.Getenv("REDIS_CLUSTER"); env != "" {
		addrs := strings.Split(env, ",")
		c := &RedisCluster{kind: RedisExternal, addrs: addrs, opt: redis.ClusterOptions{Addrs: addrs}}
		c.Client = c.NewClient(tb, nil)
		return c
	}
	if HaveRedisServer() {
		return ProcessRedisCluster(tb)
	}
	tb.Log("REDIS_CLUSTER is unset and redis-server is not on PATH: a cluster of 3 miniredis nodes, slots mapped by the client")
	return embeddedCluster(tb)
}

// ProcessRedisCluster starts a cluster of redis-server processes of the test's
// own; the caller checks HaveRedisServer first.
func ProcessRedisCluster(tb testing.TB) *RedisCluster {
	tb.Helper()
	ctx, cancel := context.WithTimeout(tb.Context(), time.Minute)
	defer cancel()
	procs, err := child.StartCluster(ctx, tb.TempDir())
	if err != nil {
		tb.Fatalf("starting a Redis Cluster: %v", err)
	}
	tb.Cleanup(procs.Stop)
	c := &RedisCluster{kind: RedisProcess, procs: procs, addrs: procs.Addrs(), opt: redis.ClusterOptions{Addrs: procs.Addrs()}}
	c.Client = c.NewClient(tb, nil)
	return c
}

func embeddedCluster(tb testing.TB) *RedisCluster {
	tb.Helper()
	c := &RedisCluster{kind: RedisEmbedded}
	for range 3 {
		emb, err := embedded.StartRedis()
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(emb.Close)
		c.emb = append(c.emb, emb)
		c.addrs = append(c.addrs, emb.Addr())
	}
	slots := child.EvenSlots(c.addrs)
	c.opt.ClusterSlots = func(context.Context) ([]redis.ClusterSlot, error) { return slots, nil }
	c.Client = c.NewClient(tb, nil)
	return c
}

// NewClient returns a client of the cluster, closed when the test ends,
// made with opt (nil: the defaults) and what reaches the nodes (their
// addresses, or the embedded cluster's slot map): for a test that needs a
// client of its own, with a connection hook. It fails the test unless the
// cluster answers.
func (c *RedisCluster) NewClient(tb testing.TB, opt *redis.ClusterOptions) *redis.ClusterClient {
	tb.Helper()
	o := redis.ClusterOptions{}
	if opt != nil {
		o = *opt
	}
	o.Addrs, o.ClusterSlots = c.opt.Addrs, c.opt.ClusterSlots
	o.DialerRetries = 1
	cc := redis.NewClusterClient(&o)
	tb.Cleanup(func() { cc.Close() })
	if err := cc.Ping(tb.Context()).Err(); err != nil {
		tb.Fatalf("the Redis Cluster does not answer: %v", err)
	}
	return cc
}

func (c *RedisCluster) Kind() RedisKind { return c.kind }

// Addrs are the nodes' host:port, masters and replicas.
func (c *RedisCluster) Addrs() []string { return slices.Clone(c.addrs) }

// Procs is the cluster's processes, nil unless Kind() == RedisProcess.
func (c *RedisCluster) Procs() *child.ClusterProcs { return c.procs }
