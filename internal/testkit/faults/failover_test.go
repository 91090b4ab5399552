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
	s := newSale(t, testenv.Start(t, cfg, app.Extras{}))

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
	var (
		mu       sync.Mutex
		accepted []string
		next     atomic.Int64
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	next.Store(burstUsers)
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				u := next.Add(1)
				if o := s.buy(u, "during-"+strconv.FormatInt(u, 10)); o.status == http.StatusAccepted {
					mu.Lock()
					accepted = append(accepted, o.order)
					mu.Unlock()
				}
			}
		})
	}
	err := <-failedOver
	close(stop)
	wg.Wait()
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
	s := newSale(t, testenv.Start(t, cfg, app.Extras{}))
	l := s.createAsyncOnReplicas(30, 3)
	m := masterOf(t, c, l.StreamKey(0))
	mc := redis.NewClient(&redis.Options{Addr: m})
	t.Cleanup(func() { mc.Close() })
	waitFor(t, "the master "+m+" has an online replica", func() bool {
		info, err := mc.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "slave0:") && strings.Contains(info, "state=online")
	})
	r := replicaOf(t, mc)
	rc := redis.NewClient(&redis.Options{Addr: r})
	t.Cleanup(func() { rc.Close() })
	if err := rc.Do(t.Context(), "CLUSTER", "FAILOVER").Err(); err != nil {
		t.Fatal(err)
	}
	if err := child.WaitFailover(t.Context(), c.Addrs(), m); err != nil {
		t.Fatal(err)
	}
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
	if err := mc.Do(t.Context(), "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m+" a master again", func() bool {
		role, err := mc.Do(t.Context(), "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	})
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
	waitFor(t, r+" a replica of "+m+" again, in sync", func() bool {
		info, err := rc.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
	})
	for _, addr := range c.Addrs() {
		if err := child.WaitClusterOK(t.Context(), addr); err != nil {
			t.Fatal(err)
		}
	}
	// Its consumer drains the queue, and its reconciler enrols the streams
	// whose registry the takeover may have lost.
	startChildArgs(t, append(childArgs(cfg), "-reconcile-every", "1s"))
	waitWritten(t, s, told)
}
