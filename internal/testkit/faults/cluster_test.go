package faults_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/stock"
	"seckill/internal/testkit"
	"seckill/internal/testkit/child"
	"seckill/internal/testkit/testenv"
)

// clusterConfig is config on a Redis Cluster, with the instances sharing
// one SQLite file unless MYSQL_DSN names a database.
func clusterConfig(t *testing.T, c *testkit.RedisCluster) app.Config {
	t.Helper()
	cfg := config(t, "", "")
	cfg.RedisAddr, cfg.RedisCluster = "", c.Addrs()
	if cfg.MySQLDSN == "" {
		cfg.SQLitePath = filepath.Join(t.TempDir(), "orders.db")
	}
	return cfg
}

// needClusterProcesses skips a subtest that needs a cluster of redis-server
// processes: the service checks each node with CLUSTER INFO, which
// miniredis lacks, and a failover needs real replicas.
func needClusterProcesses(t *testing.T) {
	t.Helper()
	if !testkit.HaveRedisServer() {
		testkit.Skip(t, testkit.NoRedisServer, "needs redis-server on PATH: the service checks each node with CLUSTER INFO, which miniredis lacks, and a failover needs replicas")
	}
}

// buyAccepted is buy, with an async purchase's 202 read as its 201.
func buyAccepted(ctx context.Context, c *http.Client, url string, product, user int64, key string) outcome {
	o := buy(ctx, c, url, product, user, key)
	if o.status == http.StatusAccepted {
		o.status = http.StatusCreated
	}
	return o
}

// TestRedisCluster runs the service on a Redis Cluster of the test's own
// (REDIS_CLUSTER's when set): refused on a node that is not a cluster
// node; one order per buyer across three processes; and a master killed
// mid-burst.
func TestRedisCluster(t *testing.T) {
	t.Run("a node not in cluster mode is refused", func(t *testing.T) {
		plain := testkit.NewRedis(t)
		cfg := config(t, "", "")
		cfg.RedisAddr, cfg.RedisCluster = "", []string{plain.Addr()}
		srv, err := app.Start(t.Context(), cfg, nil, app.Extras{})
		if err == nil {
			srv.Shutdown(context.Background())
			t.Fatal("the service started on a plain Redis as a cluster")
		}
		if !strings.Contains(err.Error(), plain.Addr()) {
			t.Errorf("refused with %q, which does not name the node %s", err, plain.Addr())
		}
	})

	t.Run("one order per buyer across 3 processes", func(t *testing.T) {
		needClusterProcesses(t)
		cfg := clusterConfig(t, testkit.NewRedisCluster(t))
		srv := start(t, cfg, app.Extras{})
		a, b := startChild(t, cfg), startChild(t, cfg)
		s := newSale(t, srv, a.URL, b.URL)
		for i, mode := range []string{api.ModeLua, api.ModeRMW, api.ModeAsync} {
			t.Run(mode, func(t *testing.T) {
				s.t = t
				s.product = testenv.ProductID(t) // lab or not is fixed at creation: async is a lab product here
				s.reset(30, "token", mode)
				user := int64(7 + i)
				outs := make([]outcome, 50)
				gate := make(chan struct{})
				var wg sync.WaitGroup
				for k := range outs {
					wg.Go(func() {
						<-gate
						outs[k] = buyAccepted(context.Background(), s.client, s.urls[k%3], s.product, user, fmt.Sprintf("one-%s-%d", mode, k))
					})
				}
				close(gate)
				wg.Wait()
				c := counts(outs)
				if c["201 "] != 1 || c["409 "+api.CodeAlreadyBought] != 49 {
					t.Errorf("one buyer's 50 purchases at once over 3 processes: %v; want one order, 49 already_bought", c)
				}
				waitFor(t, "the queue drained", func() bool { return s.audit().Queued == 0 })
				st := s.checkPromise(outs)
				if len(st.byUser[user]) != 1 {
					t.Errorf("the buyer has %d orders, want 1", len(st.byUser[user]))
				}
			})
		}
	})

	t.Run("a master killed mid-burst", func(t *testing.T) {
		needClusterProcesses(t)
		c := testkit.ProcessRedisCluster(t)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the cluster's logs:\n%s", c.Procs().Logs(25))
			}
		})
		cfg := clusterConfig(t, c)
		srv := start(t, cfg, app.Extras{})
		s := newSale(t, srv)
		s.reset(400, "none", "lua")
		p := stock.Layout{ID: s.product}
		victim := masterOf(t, c, p.StockKey(0))
		bu := s.startBurst(300, 40)
		bu.waitAnswered(t, 60)
		if err := c.Procs().Kill(victim); err != nil {
			t.Fatal(err)
		}
		t.Logf("killed master %s, which holds shard 0 of product %d", victim, s.product)
		outs := bu.wait(t)
		if err := child.WaitFailover(t.Context(), c.Addrs(), victim); err != nil {
			t.Fatal(err)
		}
		cn := counts(outs)
		t.Logf("answers: %v", cn)
		if cn["503 "+api.CodeUnavailable]+cn["503 "+api.CodeOutcomeUnknown] == 0 {
			t.Error("no purchase was told the node was unavailable: the kill struck nothing")
		}
		for k, n := range cn {
			if code, _ := strconv.Atoi(k[:3]); code == http.StatusInternalServerError {
				t.Errorf("%d purchases answered %s", n, k)
			}
		}
		s.reconcile()
		s.checkPromise(outs)
		s.rebuyStranded(t, outs)
		s.checkPromise(nil)
	})
}

// masterOf returns the master whose slot ranges hold key's slot, asking
// the cluster.
func masterOf(t *testing.T, c *testkit.RedisCluster, key string) string {
	t.Helper()
	masters, err := child.Masters(t.Context(), c.Client)
	if err != nil {
		t.Fatal(err)
	}
	slot, err := c.Client.ClusterKeySlot(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	for addr, ranges := range masters {
		for _, r := range ranges {
			if r[0] <= slot && slot <= r[1] {
				return addr
			}
		}
	}
	t.Fatalf("no master serves slot %d", slot)
	return ""
}

// rebuyStranded has every buyer told 503 buy again, all at once, with a new
// key: each gets an order, or is told of the one it has, or (a purchase cut
// short while its take was on the wire, whose claim stays until its window
// passes) that a purchase of theirs is in progress. None is refused
// otherwise.
func (s *sale) rebuyStranded(t *testing.T, outs []outcome) {
	t.Helper()
	stranded := noAnswer(outs)
	again := make([]outcome, len(stranded))
	var wg sync.WaitGroup
	for i, o := range stranded {
		wg.Go(func() {
			// 503 unavailable says "nothing was sold, try again": the
			// burst of new connections to the promoted master may time out
			// a dial. 503 rebuilding says the same while the service lays a
			// shard out again: a promoted replica that had not received
			// the shard's last writes is rebuilt from the orders. The buyer
			// tries again, with its key, for a few seconds.
			for try := 0; try < 50; try++ {
				again[i] = buyAccepted(context.Background(), s.client, s.urls[0], s.product, o.user, "again-"+strconv.FormatInt(o.user, 10))
				if again[i].code != api.CodeUnavailable && again[i].code != api.CodeRebuilding {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	var bought, had, inFlight int
	for i, a := range again {
		switch {
		case a.status == http.StatusCreated:
			bought++
		case a.code == api.CodeAlreadyBought && a.order != "":
			had++
		case a.code == api.CodeAlreadyBought:
			inFlight++
		default:
			t.Errorf("%v; buying again: %v, want an order, the order they have, or in progress", stranded[i], a)
		}
	}
	t.Logf("%d clients got no answer: %d bought again, %d had an order after all, %d still held by a claim in its window", len(stranded), bought, had, inFlight)
}
