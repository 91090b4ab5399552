package faults_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/order"
	"seckill/internal/stock"
	"seckill/internal/testkit"
	"seckill/internal/testkit/child"
	"seckill/internal/testkit/testenv"
)

// An async sale on a Redis Cluster whose streams are on two masters or
// more, and one of them killed: until its replica takes over, every read
// round of the consumer fails on the dead node's stream. The orders the
// living nodes' streams delivered in those rounds are written at once, not
// left delivered and unacknowledged until the claim (-claim-idle, here 5
// minutes, so that only the round itself can write them): every 202 told
// while the node was down is a row within the test's patience.
func TestFailoverLeavesNoOrderBehind(t *testing.T) {
	needClusterProcesses(t)
	c := testkit.ProcessRedisCluster(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the cluster's logs:\n%s", c.Procs().Logs(25))
		}
	})
	cfg := clusterConfig(t, c)
	cfg.ClaimIdle = 5 * time.Minute
	s := newSale(t, start(t, cfg, app.Extras{}))

	// A first sale puts the day's order id key and the stream registry on
	// their masters; purchases need both, so the victim holds neither. It
	// holds a stream of the product, and a living master holds another.
	const shards = 6
	s.createAsync(shards)
	if o := s.buy(1, "first"); o.status != http.StatusAccepted {
		t.Fatalf("a purchase before the kill: %v", o)
	}
	busy := map[string]bool{}
	for _, pattern := range []string{"ids:order:*", stock.StreamsKey + "*"} {
		for _, k := range keysOnCluster(t, c, pattern) {
			busy[masterOf(t, c, k)] = true
		}
	}
	var victim string
	for victim == "" {
		s.product = testenv.ProductID(t)
		victim = victimOf(t, c, s.product, shards, busy)
	}
	s.createAsync(shards)
	// An order on every shard, written: every stream is registered and
	// each read round names them all.
	var first []string
	for u := int64(1); u < 1000 && len(keysOnCluster(t, c, "seckill:orders:{"+strconv.FormatInt(s.product, 10)+"_*")) < shards; u++ {
		o := s.buy(u, "first-"+strconv.FormatInt(u, 10))
		if o.status != http.StatusAccepted {
			t.Fatalf("a purchase before the kill: %v", o)
		}
		first = append(first, o.order)
	}
	waitWritten(t, s, first)
	if err := c.Procs().Kill(victim); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed master %s, which holds streams of product %d", victim, s.product)

	// Buyers until every living node sees the failover. The 202s they are
	// told are all on the living masters' streams: the dead one takes
	// nothing.
	failedOver := make(chan error, 1)
	go func() { failedOver <- child.WaitFailover(context.Background(), c.Addrs(), victim) }()
	b := s.startBuyers(8)
	err := <-failedOver
	var accepted []string
	for _, o := range b.end() {
		if o.status == http.StatusAccepted {
			accepted = append(accepted, o.order)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(accepted) == 0 {
		t.Fatal("no purchase was accepted while the node was down: the test shows nothing")
	}
	t.Logf("%d purchases accepted between the kill and the failover", len(accepted))
	waitWritten(t, s, accepted)
}

// createAsync creates the sale's product: async, in shards shards, with
// more units than the test's buyers.
func (s *sale) createAsync(shards int) {
	s.t.Helper()
	units := 100_000
	req := api.ProductRequest{ID: &s.product, Stock: &units, Shards: &shards, Lock: "none", Mode: api.ModeAsync,
		Lab: true} // async on a Redis that keeps nothing
	if status, body := s.operator(s.urls[0]+"/api/products", req); status != http.StatusOK {
		s.t.Fatalf("creating product %d: %d %s", s.product, status, body)
	}
}

// keysOnCluster returns the keys matching pattern on every master.
func keysOnCluster(t *testing.T, c *testkit.RedisCluster, pattern string) []string {
	t.Helper()
	var (
		mu  sync.Mutex
		out []string
	)
	err := c.Client.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, pattern).Result()
		mu.Lock()
		out = append(out, keys...)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// victimOf returns a master that holds the stream of some shard of
// product, and not all of them, and is not busy; or "" if none is.
func victimOf(t *testing.T, c *testkit.RedisCluster, product int64, shards int, busy map[string]bool) string {
	t.Helper()
	l := stock.Layout{ID: product}
	on := map[string]int{}
	for k := range shards {
		on[masterOf(t, c, l.StreamKey(k))]++
	}
	for m, n := range on {
		if !busy[m] && n < shards {
			return m
		}
	}
	return ""
}

// waitWritten polls the database until every order of ids has its row,
// within patience, and fails naming how many have none.
func waitWritten(t *testing.T, s *sale, ids []string) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		var n int64
		if err := s.db.Model(&order.Order{}).Where("id IN ?", ids).Count(&n).Error; err != nil {
			t.Fatal(err)
		}
		if n == int64(len(ids)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d orders told 202 have no row %s later (the claim idle is 5m)", int64(len(ids))-n, len(ids), patience)
		}
		time.Sleep(20 * time.Millisecond) // the poll interval
	}
}

// A stale master taking its slots back over (CLUSTER FAILOVER TAKEOVER),
// async mode, a product that is not a lab product (issue 37: one buyer told
// 202 for an order that never became a row). Shard 0's replica R takes over
// from its master M, which then stops (SIGSTOP, its replication link
// closed): the 202s of shard 0 are
// told while R's entries are on R alone. Then R stops, M resumes without
// them and takes over. No consumer runs until then, so an entry lost is an
// order lost. Every 202 must become a row: the product is replicated by
// default, and R, with no replica to acknowledge, answers 503
// outcome_unknown instead of a 202 that the takeover loses.
func TestAsync202SurvivesATakeover(t *testing.T) {
	needClusterProcesses(t)
	c := replicatedCluster(t)
	cfg := clusterConfig(t, c)
	cfg.Consume = false // the instance started after the takeover drains the queue
	s := newSale(t, start(t, cfg, app.Extras{}))
	l := s.createAsyncOnReplicas(30, 3)
	p := pairOf(t, c, l.StreamKey(0))
	p.promoteReplica(t, c)
	m, r, rc := p.m, p.r, p.rc
	if err := c.Procs().Pause(m); err != nil {
		t.Fatal(err)
	}
	// Its link to R closed, so that what R writes next waits in no socket
	// of M's: M comes back without it.
	if err := rc.Do(t.Context(), "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	var outs []outcome
	for u := int64(1); u <= 12; u++ {
		outs = append(outs, buyAccepted(t.Context(), s.client, s.urls[0], s.product, u, "t-"+strconv.FormatInt(u, 10)))
	}
	if err := c.Procs().Pause(r); err != nil {
		t.Fatal(err)
	}
	if err := c.Procs().Resume(m); err != nil {
		t.Fatal(err)
	}
	p.takeBack(t)
	if err := c.Procs().Resume(r); err != nil {
		t.Fatal(err)
	}
	t.Logf("told during the takeover: %v", counts(outs))
	var told []string
	for _, o := range outs {
		if o.status == http.StatusCreated { // buyAccepted reads a 202 as a 201
			told = append(told, o.order)
		}
	}
	p.rejoined(t, c)
	// Its consumer drains the queue, and its reconciler enrols the streams
	// whose registry the takeover may have lost.
	startChildArgs(t, append(childArgs(cfg), "-reconcile-every", "1s"))
	waitWritten(t, s, told)
}

// shardPair is the master M of a key's slot and its replica R, with a
// client of each.
type shardPair struct {
	m, r   string
	mc, rc *redis.Client
}

// pairOf returns the master of key's slot and its replica, once the
// replica is online.
func pairOf(t *testing.T, c *testkit.RedisCluster, key string) shardPair {
	t.Helper()
	p := shardPair{m: masterOf(t, c, key)}
	p.mc = redis.NewClient(&redis.Options{Addr: p.m})
	t.Cleanup(func() { p.mc.Close() })
	waitFor(t, "the master "+p.m+" has an online replica", onlineReplica(t, p.mc))
	p.r = replicaOf(t, p.mc)
	p.rc = redis.NewClient(&redis.Options{Addr: p.r})
	t.Cleanup(func() { p.rc.Close() })
	return p
}

// onlineReplica reports whether the master of c has an online replica.
func onlineReplica(t *testing.T, c *redis.Client) func() bool {
	return func() bool {
		info, err := c.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "slave0:") && strings.Contains(info, "state=online")
	}
}

// promoteReplica has R take over from M (CLUSTER FAILOVER: M follows it
// as a replica) and waits until every node sees it.
func (p shardPair) promoteReplica(t *testing.T, c *testkit.RedisCluster) {
	t.Helper()
	if err := p.rc.Do(t.Context(), "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatal(err)
	}
	if err := child.WaitFailover(t.Context(), c.Addrs(), p.m); err != nil {
		t.Fatal(err)
	}
}

// takeBack has M take its slots back over without R's consent (CLUSTER
// FAILOVER TAKEOVER) and waits until it is a master.
func (p shardPair) takeBack(t *testing.T) {
	t.Helper()
	if err := p.mc.Do(t.Context(), "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p.m+" a master again", func() bool {
		role, err := p.mc.Do(t.Context(), "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	})
}

// rejoined waits until R, running again, is M's replica in sync and every
// node's cluster state is ok.
func (p shardPair) rejoined(t *testing.T, c *testkit.RedisCluster) {
	t.Helper()
	waitFor(t, p.r+" a replica of "+p.m+" again, in sync", func() bool {
		info, err := p.rc.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
	})
	for _, addr := range c.Addrs() {
		if err := child.WaitClusterOK(t.Context(), addr); err != nil {
			t.Fatal(err)
		}
	}
}

// buyers are concurrent buyers, each buying once, until the test ends
// them.
type buyers struct {
	mu       sync.Mutex
	outs     []outcome
	answered atomic.Int64
	stop     chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
}

// startBuyers starts n buyers at once, numbered from burstUsers on; the
// test's end ends them.
func (s *sale) startBuyers(n int) *buyers {
	b := &buyers{stop: make(chan struct{})}
	var next atomic.Int64
	next.Store(burstUsers)
	for range n {
		b.wg.Go(func() {
			for {
				select {
				case <-b.stop:
					return
				default:
				}
				u := next.Add(1)
				o := s.buy(u, "b-"+strconv.FormatInt(u, 10))
				b.mu.Lock()
				b.outs = append(b.outs, o)
				b.mu.Unlock()
				b.answered.Add(1)
			}
		})
	}
	s.t.Cleanup(func() { b.end() })
	return b
}

// read calls f with what the buyers were told so far, in the order told.
func (b *buyers) read(f func(outs []outcome)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b.outs)
}

// end stops the buyers and returns what they were told.
func (b *buyers) end() []outcome {
	b.once.Do(func() { close(b.stop) })
	b.wg.Wait()
	return b.outs
}
