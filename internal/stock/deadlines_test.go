package stock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/idgen"
	"seckill/internal/stock"
	"seckill/internal/testkit"
)

// deadlineStore is a store with a registry of deadline sets of its own,
// deleted when the test ends.
func deadlineStore(t *testing.T, rdb redis.UniversalClient, prefix string) *stock.Store {
	t.Helper()
	name := fmt.Sprint(prefix, "-", rand.Int64())
	t.Cleanup(func() { rdb.Del(context.Background(), stock.DueSetsKey+":"+name) })
	return stock.NewStore(rdb, nil).ForDeployment(name)
}

// deadlinesOf are n deadlines of p, due now, spread over its shards.
func deadlinesOf(p stock.Product, n int) []stock.Deadline {
	ds := make([]stock.Deadline, n)
	for i := range ds {
		ds[i] = stock.Deadline{Product: p.ID, Shard: i % p.Shards, Order: idgen.ID(1<<53 + rand.Int64N(1<<50)), Due: time.Now()}
	}
	return ds
}

// pollDue claims what is due in every registered set and settles it, as
// the lifecycle's pass does, and returns the orders claimed.
func pollDue(ctx context.Context, dl *stock.Deadlines) ([]idgen.ID, error) {
	sets, err := dl.DueSets(ctx)
	if err != nil {
		return nil, err
	}
	var claimed []idgen.ID
	for _, set := range sets {
		ids, err := dl.ClaimDue(ctx, set, time.Now().Add(time.Second), time.Minute, 1000)
		if err != nil {
			return claimed, err
		}
		claimed = append(claimed, ids...)
		if err := dl.Unschedule(ctx, set, ids...); err != nil {
			return claimed, err
		}
	}
	return claimed, nil
}

// An emptied deadline set leaves the pollers' registry, on one Redis at
// once and on a cluster once it took no deadline for the idle time; a set
// holding a deadline never does. The next schedule opens and enrols it
// again, and its deadline is claimed.
func TestEmptyDeadlineSetsLeaveTheRegistry(t *testing.T) {
	for _, cl := range testkit.OneRedisAndCluster(t) {
		t.Run(cl.Name, func(t *testing.T) {
			ctx := t.Context()
			dl := deadlineStore(t, cl.RDB, "due").Deadlines()
			p := clusterProduct(t, cl.RDB, 2)
			forget := func(want int, why string) {
				t.Helper()
				if n, err := dl.ForgetIdleDueSets(ctx); err != nil || n != want {
					t.Fatalf("%s: closed %d deadline sets (%v), want %d", why, n, err, want)
				}
			}
			registered := func(want int) {
				t.Helper()
				if sets, err := dl.DueSets(ctx); err != nil || len(sets) != want {
					t.Fatalf("registered %v (%v), want %d sets", sets, err, want)
				}
			}
			if err := dl.Schedule(ctx, deadlinesOf(p, 4)); err != nil {
				t.Fatal(err)
			}
			registered(2)
			forget(0, "sets holding deadlines")
			if got, err := pollDue(ctx, dl); err != nil || len(got) != 4 {
				t.Fatalf("claimed %d deadlines (%v), want 4", len(got), err)
			}
			if cl.Cluster {
				forget(0, "sets that took a deadline just now")
				dl.Idle(0)
			}
			forget(2, "emptied sets")
			registered(0)
			for shard := range 2 {
				if n, _ := cl.RDB.Exists(ctx, p.DueKey(shard)+":open").Result(); n != 0 {
					t.Errorf("shard %d's deadline set is still marked open after its close", shard)
				}
			}
			again := deadlinesOf(p, 1)
			if err := dl.Schedule(ctx, again); err != nil {
				t.Fatal(err)
			}
			registered(1)
			if got, err := pollDue(ctx, dl); err != nil || len(got) != 1 || got[0] != again[0].Order {
				t.Errorf("after the close, claimed %v (%v); want the new deadline %s", got, err, again[0].Order)
			}
		})
	}
}

// On a Redis Cluster, a schedule is one script per deadline set, in the
// set's slot, pipelined: no command touches the registry, a key every
// schedule would share, but the enrolment of a set found closed, once.
func TestScheduleOnAClusterIsAScriptPerSet(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	rec := &keyRecorder{}
	rdb := c.NewClient(t, nil)
	rdb.AddHook(rec)
	dl := deadlineStore(t, rdb, "schedule").Deadlines()
	p := clusterProduct(t, rdb, 5)
	ctx := t.Context()
	registry := func(cmds []recorded) int {
		n := 0
		for _, c := range cmds {
			if len(c.keys) == 1 && strings.HasPrefix(c.keys[0], stock.DueSetsKey) {
				n++
			}
		}
		return n
	}
	if err := dl.Schedule(ctx, deadlinesOf(p, 10)); err != nil {
		t.Fatal(err)
	}
	if n := registry(rec.take()); n != 5 {
		t.Errorf("the first schedule on 5 closed sets enrolled %d, want 5", n)
	}
	if err := dl.Schedule(ctx, deadlinesOf(p, 20)); err != nil {
		t.Fatal(err)
	}
	cmds := rec.take()
	if len(cmds) != 5 {
		t.Errorf("20 deadlines on 5 open sets sent %d commands, want 5: %v", len(cmds), cmds)
	}
	for _, c := range cmds {
		if !strings.HasPrefix(c.name, "eval") {
			t.Errorf("a schedule sent %s %v, not a script", c.name, c.keys)
		}
		for _, k := range c.keys {
			if slot(k) != slot(c.keys[0]) {
				t.Errorf("%s spans slots: %v", c.name, c.keys)
			}
		}
	}
	if n := registry(cmds); n != 0 {
		t.Errorf("a schedule on open sets touched the registry %d times", n)
	}
}

// The registry's protocol holds for the deadline sets under a race:
// schedulers add deadlines in waves while a poller claims and settles what
// is due and a closer closes every empty set as fast as it can (no idle
// time); the schedulers' enrolments and the closer's drops are held a
// moment each, so that they cross. At the end every deadline scheduled was
// claimed, by the poller or by a last poll of the registered sets: none
// sat in a set the registry had lost. A closer this fast may close a set
// again and again while a schedule enrols it (each close of a closed set
// moves its generation on): the schedule gives up after maxReopens rounds
// and says so, and its deadlines are left to the reconciler, as any that
// failed to be scheduled. Those are counted, and must stay rare.
func TestNoDeadlineLeftOutsideTheRegistry(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	ctx := t.Context()
	name := fmt.Sprint("due-race-", rand.Int64())
	t.Cleanup(func() { c.Client.Del(context.Background(), stock.DueSetsKey+":"+name) })
	slow := func() *stock.Deadlines {
		rdb := c.NewClient(t, nil)
		rdb.AddHook(testkit.SlowRegistry{Prefix: stock.DueSetsKey, Most: 3 * time.Millisecond})
		return stock.NewStore(rdb, nil).ForDeployment(name).Deadlines().Idle(0)
	}
	dl, scheduler, closer := stock.NewStore(c.Client, nil).ForDeployment(name).Deadlines(), slow(), slow()
	p := clusterProduct(t, c.Client, 3)
	const waves, schedulers = 15, 10
	var mu sync.Mutex
	claimed := map[idgen.ID]bool{}
	poll := func() (int, error) {
		ids, err := pollDue(ctx, dl)
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			claimed[id] = true
		}
		return len(ids), err
	}
	var closes, gaveUp int
	stop := testkit.Loops(func() {
		if _, err := poll(); err != nil {
			t.Errorf("poller: %v", err)
		}
	}, func() {
		n, err := closer.ForgetIdleDueSets(ctx)
		if err != nil {
			t.Errorf("closer: %v", err)
		}
		closes += n
	})
	var scheduled []idgen.ID
	for range waves {
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for range schedulers {
			wg.Go(func() {
				<-gate
				ds := deadlinesOf(p, 1+rand.IntN(3))
				err := scheduler.Schedule(ctx, ds)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil && strings.Contains(err.Error(), "were closed"):
					gaveUp++ // its deadlines are the reconciler's; see above
					return
				case err != nil:
					t.Errorf("scheduling: %v", err)
					return
				}
				for _, d := range ds {
					scheduled = append(scheduled, d.Order)
				}
			})
		}
		close(gate)
		wg.Wait()
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	missing := testkit.Missed(t, scheduled, claimed, poll)
	t.Logf("%d scheduled, %d claimed, %d set closes, %d of %d schedules gave up", len(scheduled), len(claimed), closes, gaveUp, waves*schedulers)
	if gaveUp > waves*schedulers/10 {
		t.Errorf("%d of %d schedules gave up: the closer starves them", gaveUp, waves*schedulers)
	}
	if missing > 0 {
		t.Errorf("%d of %d deadlines scheduled were never claimed from a registered set", missing, len(scheduled))
	}
	if closes == 0 {
		t.Error("the closer closed no set: the race was not run")
	}
}
