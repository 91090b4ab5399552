package testkit

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"

	"seckill/internal/embedded"
	"seckill/internal/testkit/child"
)

// RedisCluster is a Redis Cluster a test uses: the one REDIS_CLUSTER names, or
// six redis-server processes of the test's own (3 masters, a replica each),
// or, with no redis-server on PATH, three miniredis nodes that answer
// CLUSTER SLOTS with one slot map and CLUSTER INFO with cluster_state:ok
// (miniredis alone says each node holds every slot, and knows no CLUSTER
// INFO), so that any client, the service's too, routes keys over three
// servers as on a cluster.
//
// miniredis does not refuse a script whose keys span slots (CROSSSLOT),
// nor redirect a key sent to the wrong node (MOVED), nor fail over: tests
// of those need RedisKind() == RedisProcess.
type RedisCluster struct {
	// Client is a cluster client on every node, closed when the test ends.
	Client *redis.ClusterClient

	kind  RedisKind
	procs *child.ClusterProcs // RedisProcess
	emb   []*embedded.Redis   // RedisEmbedded, the masters in slot order
	addrs []string
	opt   redis.ClusterOptions // what reaches the nodes: their addresses
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
	tb.Log("REDIS_CLUSTER is unset and redis-server is not on PATH: a cluster of 3 miniredis nodes that tell one slot map")
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
	for _, emb := range c.emb {
		emb.Miniredis().Server().SetPreHook(clusterCommands(slots))
	}
	c.opt.Addrs = c.addrs
	c.Client = c.NewClient(tb, nil)
	return c
}

// clusterCommands answers, on an embedded node, the CLUSTER commands a
// client and the service ask a node of a cluster: SLOTS with slots, the
// whole cluster's map, and INFO with a cluster whose state is ok. The rest
// go to miniredis.
func clusterCommands(slots []redis.ClusterSlot) server.Hook {
	return func(c *server.Peer, cmd string, args ...string) bool {
		if cmd != "CLUSTER" || len(args) != 1 {
			return false
		}
		switch strings.ToUpper(args[0]) {
		case "INFO":
			c.WriteBulk(fmt.Sprintf("cluster_state:ok\r\ncluster_slots_assigned:16384\r\ncluster_slots_ok:16384\r\ncluster_known_nodes:%d\r\ncluster_size:%d\r\n", len(slots), len(slots)))
		case "SLOTS":
			c.WriteLen(len(slots))
			for i, s := range slots {
				host, port, _ := net.SplitHostPort(s.Nodes[0].Addr)
				p, _ := strconv.Atoi(port)
				c.WriteLen(3)
				c.WriteInt(s.Start)
				c.WriteInt(s.End)
				c.WriteLen(3)
				c.WriteBulk(host)
				c.WriteInt(p)
				c.WriteBulk(fmt.Sprintf("%040d", i+1)) // a node id: 40 characters
			}
		default:
			return false
		}
		return true
	}
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

// OneNodeCluster is a cluster client whose every slot is on one miniredis:
// a store on it takes the cluster's paths, and a test orders their steps
// (the routing is not what it tests).
func OneNodeCluster(tb testing.TB) *redis.ClusterClient {
	mr := miniredis.RunT(tb)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: mr.Addr()}}}}, nil
		},
	})
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}
