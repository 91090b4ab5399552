package faults_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/catalogue"
	"seckill/internal/stock"
	"seckill/internal/testkit"
	"seckill/internal/testkit/child"
)

var repairRuns = flag.Int("repair-runs", 10, "how many times TestRepairForgottenTakes repeats each reproduction")

// snapshot is a copy of a layout's shards: each one's stock and ledger, as
// a Redis that restarted from an older file would hold them.
type snapshot struct {
	layout  stock.Layout
	levels  []string
	ledgers []map[string]string
}

func (s *sale) snapshot() snapshot {
	s.t.Helper()
	ctx := context.Background()
	var p catalogue.Product
	if err := s.db.WithContext(ctx).Take(&p, s.product).Error; err != nil {
		s.t.Fatal(err)
	}
	snap := snapshot{layout: stock.Layout{ID: p.ID, Shards: p.Shards, Epoch: p.Epoch}}
	for k := range p.Shards {
		n, err := s.rdb.Get(ctx, snap.layout.StockKey(k)).Result()
		if err != nil {
			s.t.Fatal(err)
		}
		l, err := s.rdb.HGetAll(ctx, snap.layout.LedgerKey(k)).Result()
		if err != nil {
			s.t.Fatal(err)
		}
		snap.levels, snap.ledgers = append(snap.levels, n), append(snap.ledgers, l)
	}
	return snap
}

// putBack writes the copy over the shards and forgets the buyer keys of
// users: what a Redis back from a file older than their takes holds.
func (s *sale) putBack(snap snapshot, users []int64) {
	s.t.Helper()
	ctx := context.Background()
	for k, n := range snap.levels {
		l := snap.layout
		if err := s.rdb.Set(ctx, l.StockKey(k), n, 0).Err(); err != nil {
			s.t.Fatal(err)
		}
		if err := s.rdb.Del(ctx, l.LedgerKey(k)).Err(); err != nil {
			s.t.Fatal(err)
		}
		if len(snap.ledgers[k]) > 0 {
			if err := s.rdb.HSet(ctx, l.LedgerKey(k), snap.ledgers[k]).Err(); err != nil {
				s.t.Fatal(err)
			}
		}
	}
	for _, u := range users {
		if err := s.rdb.Del(ctx, snap.layout.BuyerKey(u)).Err(); err != nil {
			s.t.Fatal(err)
		}
	}
}

// sold returns the users told 201 in outs.
func sold(outs []outcome) []int64 {
	var users []int64
	for _, o := range outs {
		if o.status == http.StatusCreated {
			users = append(users, o.user)
		}
	}
	return users
}

// burstFrom is startBurst with the buyers numbered from base.
func (s *sale) burstFrom(base int64, users, concurrency int) []outcome {
	outs := make([]outcome, users)
	gate := make(chan struct{})
	done := make(chan struct{}, concurrency)
	next := make(chan int, users)
	for i := range users {
		next <- i
	}
	close(next)
	for range concurrency {
		go func() {
			defer func() { done <- struct{}{} }()
			<-gate
			for i := range next {
				user := base + int64(i)
				outs[i] = buy(context.Background(), s.client, s.urls[0], s.product, user, "b-"+strconv.FormatInt(user, 10))
			}
		}()
	}
	close(gate)
	for range concurrency {
		<-done
	}
	return outs
}

// The store forgets takes whose orders exist (a Redis back from an AOF
// that lost its last second; a replica promoted without its master's last
// takes): their units are in the stock again and the ledger lacks them.
// Reproduced on one Redis: copy the shards' stock and ledgers, sell 30
// more, put the copies back and forget those 30 buyers. The reconciler's
// pass takes the 30 units back, once, with their takes recorded again: a
// second burst sells only what remains, and the audit is exact and says
// what was repaired. Without the repair, the second burst sold 30 units
// twice (130 orders for 100 units in the run).
func TestRepairForgottenTakes(t *testing.T) {
	t.Run("RestartFromSnapshot", func(t *testing.T) {
		r := ownRedis(t)
		if r.Kind != "redis-server" {
			testkit.Skip(t, testkit.NoRedisServer, "needs redis-server on PATH: the embedded Redis keeps no snapshot across a restart and tells no run id")
		}
		srv := start(t, config(t, r.Addr, ""), app.Extras{})
		for run := range *repairRuns {
			t.Run(strconv.Itoa(run), func(t *testing.T) { testRepairAfterRestartFromSnapshot(t, r, srv) })
		}
	})
	srv := start(t, config(t, "", ""), app.Extras{})
	for run := range *repairRuns {
		t.Run(fmt.Sprintf("ReconcilerPass/%d", run), func(t *testing.T) {
			s := newSale(t, srv)
			s.reset(100, "none", "lua")
			before := s.burstFrom(burstUsers, 20, 10)
			snap := s.snapshot()
			forgotten := s.burstFrom(2*burstUsers, 30, 10)
			if n := len(sold(forgotten)); n != 30 {
				t.Fatalf("30 buyers for 80 units: %d sold (%v)", n, counts(forgotten))
			}
			s.putBack(snap, sold(forgotten))

			r := s.reconcile()
			if r.Restored != 30 || r.Short != 0 || r.Orphans != 0 {
				t.Errorf("the pass after the store forgot 30 takes: %+v; want 30 restored, none short, no orphan left", r)
			}
			if again := s.reconcile(); again.Restored != 0 || again.Orphans != 0 {
				t.Errorf("a second pass: %+v; want nothing more restored", again)
			}
			s.checkPromise(append(before, forgotten...))
			for _, o := range forgotten {
				if again := s.buy(o.user, "twice"); again.code != api.CodeAlreadyBought || again.order != o.order {
					t.Errorf("%v; buying again after the repair: %v, want already bought with that order", o, again)
				}
			}

			after := s.burstFrom(3*burstUsers, 100, 20)
			if n := len(sold(after)); n != 50 {
				t.Errorf("100 buyers for the 50 units left: %d sold (%v); want 50", n, counts(after))
			}
			st := s.checkPromise(append(append(before, forgotten...), after...))
			if len(st.orders) != 100 {
				t.Errorf("%d orders for 100 units", len(st.orders))
			}
			if a := s.audit(); a.Repaired == nil || *a.Repaired != (api.Repaired{Takes: 30, Units: 30}) {
				t.Errorf("audit: repaired %+v, want 30 takes, 30 units, none short", a.Repaired)
			}
		})
	}
}

// The same loss as a Redis restarted from a snapshot taken before the last
// 30 takes: the service sees the server's new run id on its first new
// connection and repairs the product before it sells again, without a
// reconciler's pass. A burst at once after the restart sells only the 50
// units left (the first purchases may be told 503 while the connections
// to the dead server fail or while the repair runs); without the repair it
// sold the 30 forgotten units a second time.
func testRepairAfterRestartFromSnapshot(t *testing.T, r *child.Redis, srv *app.Server) {
	s := newSale(t, srv)
	s.reset(100, "none", "lua")
	before := s.burstFrom(burstUsers, 20, 10)
	if err := s.rdb.Save(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	forgotten := s.burstFrom(2*burstUsers, 30, 10)
	if n := len(sold(forgotten)); n != 30 {
		t.Fatalf("30 buyers for 80 units: %d sold (%v)", n, counts(forgotten))
	}
	if err := r.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	after := s.burstFrom(3*burstUsers, 100, 20)
	if n := len(sold(after)); n > 50 {
		t.Errorf("100 buyers at once after the restart, 50 units left: %d sold (%v); want at most 50", n, counts(after))
	}
	for _, o := range after {
		if o.status != http.StatusCreated && o.code != api.CodeSoldOut && o.code != api.CodeRebuilding && o.code != api.CodeUnavailable {
			t.Errorf("a purchase after the restart: %v, want 201, sold out, or 503 while the repair runs", o)
		}
	}
	s.reconcile()
	all := append(append(before, forgotten...), after...)
	s.checkPromise(all) // the forgotten buyers' keys among them
	if a := s.audit(); a.Repaired == nil || *a.Repaired != (api.Repaired{Takes: 30, Units: 30}) {
		t.Errorf("audit: repaired %+v, want 30 takes, 30 units, none short", a.Repaired)
	}
}

// A replica promoted without its master's last takes, on a Redis Cluster
// of the test's own: the replica of shard 0's master saves its data and is
// killed; 60 more buyers are sold units (about 20 of them on shard 0); the
// master is killed, and the replica comes back from its save and is
// promoted (cluster-replica-validity-factor 0 lets a replica that old take
// over): shard 0 has forgotten those takes. The service sees the slot's new
// master and repairs the product before it sells again, and bursts that
// sell the product out end with every unit sold once and the audit exact.
// Without the repair on the change the forgotten units were sold a second
// time (320 orders for 300 units).
func TestRepairOnCluster(t *testing.T) {
	needClusterProcesses(t)
	c := testkit.ProcessRedisCluster(t)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the cluster's logs:\n%s", c.Procs().Logs(25))
		}
	})
	srv := start(t, clusterConfig(t, c), app.Extras{})
	s := newSale(t, srv)
	s.reset(300, "none", "lua")
	master := masterOf(t, c, stock.Layout{ID: s.product}.StockKey(0))
	ctx := t.Context()
	m := redis.NewClient(&redis.Options{Addr: master})
	defer m.Close()
	before := s.burstFrom(burstUsers, 30, 10)
	replica := replicaOf(t, m)
	r := redis.NewClient(&redis.Options{Addr: replica})
	defer r.Close()
	if n, err := m.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("waiting for the replica %s: %d %v", replica, n, err)
	}
	if err := r.Save(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Procs().Kill(replica); err != nil {
		t.Fatal(err)
	}
	forgotten := s.burstFrom(2*burstUsers, 60, 10)
	if n := len(sold(forgotten)); n != 60 {
		t.Fatalf("60 buyers for 270 units: %d sold (%v)", n, counts(forgotten))
	}
	if err := c.Procs().Kill(master); err != nil {
		t.Fatal(err)
	}
	if err := c.Procs().Restart(ctx, replica); err != nil {
		t.Fatal(err)
	}
	if err := r.ConfigSet(ctx, "cluster-replica-validity-factor", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := child.WaitFailover(ctx, c.Addrs(), master); err != nil {
		t.Fatal(err)
	}
	t.Logf("shard 0's master %s killed; its replica %s promoted from a save before the last takes", master, replica)
	// Bursts until one finds the product sold out: the service's slot map
	// may name the dead master for a second more (503 unavailable).
	var after []outcome
	waitFor(t, "the product sold out after the promotion", func() bool {
		outs := s.burstFrom(3*burstUsers+int64(len(after)), 100, 20)
		after = append(after, outs...)
		return counts(outs)["409 "+api.CodeSoldOut] == len(outs)
	})
	t.Logf("after the promotion: %v", counts(after))
	s.reconcile()
	st := s.checkPromise(append(append(before, forgotten...), after...))
	if len(st.orders) > 300 {
		t.Errorf("%d orders for 300 units", len(st.orders))
	}
	a := s.audit()
	if a.Repaired == nil || a.Repaired.Takes == 0 || a.Repaired.Short != 0 {
		t.Errorf("audit: repaired %+v, want the takes shard 0 forgot taken back, none short", a.Repaired)
	}
	t.Logf("repaired: %+v", a.Repaired)
}

// replicaOf returns the address of the replica of the master m.
func replicaOf(t *testing.T, m *redis.Client) string {
	t.Helper()
	info, err := m.Info(t.Context(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "slave0:")
		if !ok {
			continue
		}
		var ip, port string
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				ip = v
			case "port":
				port = v
			}
		}
		return net.JoinHostPort(ip, port)
	}
	t.Fatalf("the master has no replica: %s", info)
	return ""
}
