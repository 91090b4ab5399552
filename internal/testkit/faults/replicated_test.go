package faults_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/idgen"
	"seckill/internal/stock"
	"seckill/internal/testkit"
	"seckill/internal/testkit/child"
	"seckill/internal/testkit/testenv"
)

// replicaPair starts a Redis master and its replica, of the test's own,
// and returns them once the replica is in sync.
func replicaPair(t testing.TB) (master, replica *child.Redis, replicaClient *redis.Client) {
	t.Helper()
	if !testkit.HaveRedisServer() {
		testkit.Skip(t, testkit.NoRedisServer, "needs redis-server on PATH: the embedded Redis has no replication")
	}
	start := func() *child.Redis {
		r, err := child.StartRedis(context.Background(), os.Args[0], t.TempDir(), os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Kill)
		return r
	}
	master, replica = start(), start()
	replicaClient = redis.NewClient(&redis.Options{Addr: replica.Addr, DialerRetries: 1, MaxRetries: -1})
	t.Cleanup(func() { replicaClient.Close() })
	host, port, _ := net.SplitHostPort(master.Addr)
	ctx := context.Background()
	if err := replicaClient.ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(patience)
	for {
		info, err := replicaClient.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return master, replica, replicaClient
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica is not in sync within %s: %v %s", patience, err, info)
		}
		time.Sleep(20 * time.Millisecond) // the poll interval
	}
}

// A replicated product (POST /api/products with "replicated": true) on a
// master with one replica: every take a buyer is told of is on the
// replica already when the answer comes (its ledger read right after each
// 201 or 202). With the replica paused, no buyer is told of a take: each
// is answered 503 outcome_unknown with its order id after the WAIT's
// timeout, while the take stands on the master. Once the replica is back,
// the same purchase tried again (same key) is told its order, now on the
// replica too; and the audit ends exact.
func TestReplicatedProduct(t *testing.T) {
	master, replica, rc := replicaPair(t)
	s := newSale(t, start(t, config(t, master.Addr, ""), app.Extras{}))
	for _, mode := range []string{api.ModeLua, api.ModeRMW, api.ModeAsync} {
		t.Run(mode, func(t *testing.T) {
			s.t = t
			s.product = testenv.ProductID(t)
			units, shards := 20, 2
			req := api.ProductRequest{ID: &s.product, Stock: &units, Shards: &shards, Lock: "token", Mode: mode, Replicated: true,
				Lab: mode == api.ModeAsync} // async on a Redis that keeps nothing: a lab product
			status, body := s.operator(s.urls[0]+"/api/products", req)
			if status != http.StatusOK {
				t.Fatalf("creating a replicated product: %d %s", status, body)
			}
			var v api.ProductView
			s.get("/api/products/"+strconv.FormatInt(s.product, 10), &v)
			if !v.Replicated {
				t.Errorf("the product view says replicated %v, want true", v.Replicated)
			}
			l := stock.Layout{ID: s.product, Shards: shards, Epoch: 1}
			onReplica := func(user int64) bool {
				for k := range shards {
					if n, err := rc.HExists(context.Background(), l.LedgerKey(k), strconv.FormatInt(user, 10)).Result(); err != nil {
						t.Fatal(err)
					} else if n {
						return true
					}
				}
				return false
			}
			told := http.StatusCreated
			if mode == api.ModeAsync {
				told = http.StatusAccepted
			}
			for u := int64(1); u <= 5; u++ {
				o := s.buy(u, "live-"+strconv.FormatInt(u, 10))
				if o.status != told {
					t.Fatalf("a purchase with the replica in sync: %v, want %d", o, told)
				}
				if !onReplica(u) {
					t.Errorf("user %d was told %d, and the replica has no take of theirs", u, o.status)
				}
			}

			if err := replica.Pause(); err != nil {
				t.Fatal(err)
			}
			var unsettled []outcome
			for u := int64(6); u <= 8; u++ {
				o := s.buy(u, "paused-"+strconv.FormatInt(u, 10))
				if o.status != http.StatusServiceUnavailable || o.code != api.CodeOutcomeUnknown || o.order == "" {
					t.Errorf("a purchase with the replica paused: %v, want 503 %s with the order id", o, api.CodeOutcomeUnknown)
				}
				unsettled = append(unsettled, o)
			}
			if err := replica.Resume(); err != nil {
				t.Fatal(err)
			}
			for _, o := range unsettled {
				again := s.buy(o.user, "paused-"+strconv.FormatInt(o.user, 10))
				// An async order the consumer wrote meanwhile is told 201.
				if (again.status != told && again.status != http.StatusCreated) || again.order != o.order {
					t.Errorf("the same purchase again, the replica back: %v, want %d with order %s", again, told, o.order)
				}
				if !onReplica(o.user) {
					t.Errorf("user %d was told %d, and the replica has no take of theirs", o.user, again.status)
				}
			}
			waitFor(t, "the queue drained", func() bool { return s.audit().Queued == 0 })
			if a := s.audit(); a.Verdict != api.VerdictOK || a.Orders != 8 {
				t.Errorf("audit: %s with %d orders, want OK with 8", a.Verdict, a.Orders)
			}
		})
	}
}

// A replicated product on a Redis Cluster: WAIT has no key, so it runs on
// the master of the take's shard (MasterForKey). With the replica of one
// shard's master paused, the takes on that master are told 503
// outcome_unknown, and every take on the others is told 201, on a replica
// when the answer comes.
func TestReplicatedProductOnCluster(t *testing.T) {
	needClusterProcesses(t)
	c := testkit.ProcessRedisCluster(t)
	s := newSale(t, start(t, clusterConfig(t, c), app.Extras{}))
	units, shards := 20, 3
	req := api.ProductRequest{ID: &s.product, Stock: &units, Shards: &shards, Mode: api.ModeLua, Replicated: true}
	if status, body := s.operator(s.urls[0]+"/api/products", req); status != http.StatusOK {
		t.Fatalf("creating a replicated product: %d %s", status, body)
	}
	l := stock.Layout{ID: s.product, Shards: shards, Epoch: 1}
	slow := masterOf(t, c, l.LedgerKey(0))
	// Asked of the master itself: the client's slot map may have been
	// loaded before the replicas joined, and list none.
	mc := redis.NewClient(&redis.Options{Addr: slow})
	t.Cleanup(func() { mc.Close() })
	waitFor(t, "the master "+slow+" has an online replica", func() bool {
		info, err := mc.Info(t.Context(), "replication").Result()
		return err == nil && strings.Contains(info, "slave0:") && strings.Contains(info, "state=online")
	})
	replica := replicaOf(t, mc)
	if err := c.Procs().Pause(replica); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Procs().Resume(replica) })
	checkTakesOnReplicas(t, s, c, l, slow, http.StatusCreated)
}

// checkTakesOnReplicas buys for 6 buyers, one at a time, on the replicated
// product of layout l: a take on the master slow, whose replica is paused,
// must be told 503 outcome_unknown with its order id; every other must be
// told ok (201, or 202) and be on its master's replica when told.
func checkTakesOnReplicas(t *testing.T, s *sale, c *testkit.RedisCluster, l stock.Layout, slow string, ok int) {
	t.Helper()
	onSlow := 0
	for u := int64(1); u <= 6; u++ {
		o := s.buy(u, "c-"+strconv.FormatInt(u, 10))
		user := strconv.FormatInt(u, 10)
		shard := -1
		for k := range l.Shards {
			if there, err := c.Client.HExists(t.Context(), l.LedgerKey(k), user).Result(); err != nil {
				t.Fatal(err)
			} else if there {
				shard = k
			}
		}
		if shard < 0 {
			t.Fatalf("%v: no shard's master holds the take", o)
		}
		if masterOf(t, c, l.LedgerKey(shard)) == slow {
			onSlow++
			if o.status != http.StatusServiceUnavailable || o.code != api.CodeOutcomeUnknown || o.order == "" {
				t.Errorf("%v, taken on %s whose replica is paused; want 503 %s with the order id", o, slow, api.CodeOutcomeUnknown)
			}
			continue
		}
		if o.status != ok {
			t.Errorf("%v, taken on a master whose replica is live; want %d", o, ok)
		}
		// The shard master's replica is asked, found through the master:
		// the client's slot map may list no replicas.
		mc := redis.NewClient(&redis.Options{Addr: masterOf(t, c, l.LedgerKey(shard))})
		rc := redis.NewClient(&redis.Options{Addr: replicaOf(t, mc)})
		conn := rc.Conn()
		if err := conn.ReadOnly(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		there, err := conn.HExists(t.Context(), l.LedgerKey(shard), user).Result()
		conn.Close()
		rc.Close()
		mc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !there {
			t.Errorf("user %d was told %d, and the replica of its shard's master has no take", u, o.status)
		}
	}
	if onSlow == 0 {
		t.Error("no purchase took from the master whose replica is paused: the test shows nothing")
	}
}

// infoField returns a field of an INFO section.
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// BenchmarkReplicated measures what "replicated": true costs a purchase
// over HTTP (lua mode, MYSQL_DSN's database or SQLite) on a master with one
// replica of the benchmark's own: req/s and the p99 of the answers, for a
// product without and one with, in one run:
//
//	go test -run '^$' -bench BenchmarkReplicated -benchtime 1000x ./internal/testkit/faults/
func BenchmarkReplicated(b *testing.B) {
	master, _, _ := replicaPair(b)
	cfg := testenv.Config(b)
	cfg.RedisAddr = master.Addr
	cfg.SessionSecret = testenv.SessionSecret // buy signs its buyers in
	srv := start(b, cfg, app.Extras{})
	c := &http.Client{Timeout: time.Minute}
	var users atomic.Int64
	// Rounds alternate without and with, so that a shared machine's
	// weather falls on both alike; the first round warms the pools. The
	// async mode's products are lab products: the pair keeps nothing.
	for _, mode := range []string{api.ModeLua, api.ModeAsync} {
		ok := http.StatusCreated
		if mode == api.ModeAsync {
			ok = http.StatusAccepted
		}
		for round, replicated := range []bool{false, true, false, true, false, true, false, true} {
			b.Run(fmt.Sprintf("mode=%s/round=%d/replicated=%v", mode, round/2, replicated), func(b *testing.B) {
				product, units, shards := testenv.ProductID(b), 10_000_000, 8
				req := api.ProductRequest{ID: &product, Stock: &units, Shards: &shards, Mode: mode, Replicated: replicated,
					Lab: mode == api.ModeAsync}
				if status, body, err := postAs(b.Context(), c, srv.URL+"/api/products", testenv.AdminToken, req); err != nil || status != http.StatusOK {
					b.Fatalf("creating product %d: %d %s %v", product, status, body, err)
				}
				var (
					mu    sync.Mutex
					took  []time.Duration
					fails atomic.Int64
				)
				b.SetParallelism(8) // 8 buyers per core at once
				b.ResetTimer()
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					var mine []time.Duration
					for pb.Next() {
						u := users.Add(1)
						t0 := time.Now()
						o := buy(context.Background(), c, srv.URL, product, u, "bench-"+strconv.FormatInt(u, 10))
						mine = append(mine, time.Since(t0))
						if o.status != ok {
							fails.Add(1)
						}
					}
					mu.Lock()
					took = append(took, mine...)
					mu.Unlock()
				})
				elapsed := time.Since(start)
				b.StopTimer()
				if n := fails.Load(); n > 0 {
					b.Errorf("%d purchases not answered %d", n, ok)
				}
				slices.Sort(took)
				b.ReportMetric(float64(len(took))/elapsed.Seconds(), "req/s")
				b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
			})
		}
	}
}

// BenchmarkReplicatedTake is BenchmarkReplicated's take alone (the lua
// mode's script, then, replicated, the write and WAIT that follow it), with
// no HTTP and no database: what the option adds to the Redis step.
//
//	go test -run '^$' -bench BenchmarkReplicatedTake -benchtime 5000x ./internal/testkit/faults/
func BenchmarkReplicatedTake(b *testing.B) {
	master, _, _ := replicaPair(b)
	rdb := redis.NewClient(&redis.Options{Addr: master.Addr, PoolSize: 64})
	b.Cleanup(func() { rdb.Close() })
	store := stock.NewStore(rdb, nil)
	var users atomic.Int64
	for round, replicated := range []bool{false, true, false, true, false, true, false, true} {
		b.Run(fmt.Sprintf("round=%d/replicated=%v", round/2, replicated), func(b *testing.B) {
			p := stock.Product{Layout: stock.Layout{ID: testenv.ProductID(b), Shards: 8, Epoch: 1},
				Where: stock.InRedis, Fallback: true, Replicated: replicated}
			if err := store.LayOut(b.Context(), p, stock.Split(10_000_000, 8), 10_000_000); err != nil {
				b.Fatal(err)
			}
			var (
				mu   sync.Mutex
				took []time.Duration
			)
			b.SetParallelism(8)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					u := users.Add(1)
					t0 := time.Now()
					_, err := store.Take(context.Background(), stock.Request{Product: p, Taker: stock.Lua{},
						Ticket: stock.Ticket{User: u, Order: idgen.ID(u), Key: "bench"}})
					mine = append(mine, time.Since(t0))
					if err != nil {
						b.Error(err)
						return
					}
				}
				mu.Lock()
				took = append(took, mine...)
				mu.Unlock()
			})
			elapsed := time.Since(start)
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(len(took))/elapsed.Seconds(), "takes/s")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// An async product that is not a lab product, on a Redis Cluster whose
// every master has a replica, is replicated without asking (issue 37: a 202
// whose stream entry was on a promoted replica only, lost when the stale
// master took back over): its 202 is told once a replica has the take and
// the entry; with a master's replica paused, the takes on that master are
// told 503 outcome_unknown with their order ids instead.
func TestAsyncReplicatedByDefaultOnCluster(t *testing.T) {
	needClusterProcesses(t)
	c := replicatedCluster(t)
	s := newSale(t, start(t, clusterConfig(t, c), app.Extras{}))
	l := s.createAsyncOnReplicas(20, 3)
	slow := masterOf(t, c, l.LedgerKey(0))
	mc := redis.NewClient(&redis.Options{Addr: slow})
	t.Cleanup(func() { mc.Close() })
	replica := replicaOf(t, mc)
	if err := c.Procs().Pause(replica); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Procs().Resume(replica) })
	checkTakesOnReplicas(t, s, c, l, slow, http.StatusAccepted)
}

// replicatedCluster starts a cluster of the test's own whose masters keep
// an append-only file (a product that is not a lab product answers 202
// only from a Redis that keeps it) and returns once every slot has a
// replica.
func replicatedCluster(t *testing.T) *testkit.RedisCluster {
	t.Helper()
	c := testkit.ProcessRedisCluster(t)
	for _, addr := range c.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: addr})
		err := n.ConfigSet(t.Context(), "appendonly", "yes").Err()
		n.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a replica for every slot", func() bool {
		slots, err := c.Client.ClusterSlots(t.Context()).Result()
		if err != nil || len(slots) == 0 {
			return false
		}
		for _, s := range slots {
			if len(s.Nodes) < 2 {
				return false
			}
		}
		return true
	})
	return c
}

// createAsyncOnReplicas creates the sale's product, async and not a lab
// product, on a cluster whose every slot has a replica: replicated without
// asking, which its view must say.
func (s *sale) createAsyncOnReplicas(units, shards int) stock.Layout {
	s.t.Helper()
	req := api.ProductRequest{ID: &s.product, Stock: &units, Shards: &shards, Mode: api.ModeAsync}
	if status, body := s.operator(s.urls[0]+"/api/products", req); status != http.StatusOK {
		s.t.Fatalf("creating an async product: %d %s", status, body)
	}
	if v := s.view(); !v.Replicated {
		s.t.Errorf("the view of an async product on a cluster with replicas: replicated %v; want replicated", v.Replicated)
	}
	return stock.Layout{ID: s.product, Shards: shards, Epoch: 1}
}
