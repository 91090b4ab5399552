package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"seckill/internal/idgen"
	"seckill/internal/lab"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/stock"
	"seckill/internal/testkit"
)

// etcdStock is a one-shard product of 5 units in Redis and an etcd lock.
type etcdStock struct {
	rdb  *redis.Client
	cli  *clientv3.Client
	etcd *lock.Etcd
	s    *stock.Store
	p    stock.Product
}

func newEtcdStock(t *testing.T) etcdStock {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: testkit.RealRedis(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	cli := testkit.EtcdClient(t)
	s := stock.NewStore(rdb, nil)
	p := stock.Product{Layout: stock.Layout{ID: time.Now().UnixNano(), Shards: 1, Epoch: 1}, Where: stock.InRedis}
	if err := s.LayOut(t.Context(), p, []int{5}, 5); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stock.Purge(context.Background(), rdb, []int64{p.ID}) })
	return etcdStock{rdb: rdb, cli: cli, etcd: lock.NewEtcd(testkit.ConnectEtcd(cli)), s: s, p: p}
}

// take buys one unit for user under l, holding its read for hold; abandon
// stops the lease's keep-alive first, as a paused process's stops.
func (e etcdStock) take(ctx context.Context, l lock.Locker, user int64, hold time.Duration, abandon bool) error {
	_, err := e.s.Take(ctx, stock.Request{Product: e.p, Hooks: order.Faults{Hold: hold, Abandon: abandon}.Hooks(),
		Taker:  stock.RMW{Locked: stock.Locked{Locker: l, Lock: lock.Options{TTL: time.Second, Wait: 10 * time.Second}}},
		Ticket: stock.Ticket{User: user, Order: idgen.ID(1000 + user), Key: "k"}})
	return err
}

// sold returns the units left and the takes the ledger records.
func (e etcdStock) sold(t *testing.T) (left, takes int) {
	t.Helper()
	levels, err := e.s.Ledgers().Levels(t.Context(), e.p)
	if err != nil {
		t.Fatal(err)
	}
	n, err := e.rdb.HLen(t.Context(), e.p.LedgerKey(0)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return levels[0], int(n)
}

// heldInEtcd waits until some session holds a key under the lock's prefix.
func heldInEtcd(t *testing.T, cli *clientv3.Client, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, err := cli.Get(t.Context(), lock.EtcdPrefix+key, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if r.Count > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nobody took %s", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestEtcdPausedHolder is the pause etcd cannot prevent, through the store:
// A takes the shard's lock, reads the stock, and stalls with its keep-alive
// stopped (as a paused process's is) past its lease; etcd expires the
// session and grants B the lock; B reads and writes; A wakes and writes what
// it read. Without the fence A's stale write lands: two takes, one unit gone,
// oversold. With the grant's revision as the fencing token it is refused.
func TestEtcdPausedHolder(t *testing.T) {
	for _, fence := range []bool{false, true} {
		name := map[bool]string{false: "unfenced", true: "fenced"}[fence]
		t.Run(name, func(t *testing.T) {
			e := newEtcdStock(t)
			var l lock.Locker = e.etcd
			if !fence {
				l = lab.Unfenced{Locker: e.etcd} // the etcd lock with its fence taken away
			}
			stale := make(chan error, 1)
			// A: its lease is at least 1s, and at most etcd's minimum
			// (2s at etcd's default timing); it holds its read for 4s.
			go func() { stale <- e.take(t.Context(), l, 1, 4*time.Second, true) }()
			heldInEtcd(t, e.cli, e.p.LockKey(0))
			if err := e.take(t.Context(), l, 2, 0, false); err != nil { // B: waits for A's lease to lapse
				t.Fatalf("B: %v", err)
			}
			aErr := <-stale
			left, takes := e.sold(t)
			t.Logf("%s: A's late write: %v; %d left, %d takes", name, aErr, left, takes)
			if fence {
				if !errors.Is(aErr, stock.ErrLeaseLost) || left != 4 || takes != 1 {
					t.Errorf("fenced: A = %v, %d left, %d takes; want A refused (lease lost), 4 left, 1 take (B's)", aErr, left, takes)
				}
				return
			}
			if aErr != nil || left != 4 || takes != 2 {
				t.Errorf("unfenced: A = %v, %d left, %d takes; want A's stale write landed: 4 left after 2 takes (oversold)", aErr, left, takes)
			}
		})
	}
}

// TestEtcdSessionLostMidHold: the holder's lease is revoked while it holds
// the lock (a session lost to etcd), and nobody else takes the lock. The
// keep-alive learns it, lock.Lost fires, and the write is not made: lease
// lost, the unit stays in stock.
func TestEtcdSessionLostMidHold(t *testing.T) {
	e := newEtcdStock(t)
	done := make(chan error, 1)
	go func() { done <- e.take(t.Context(), e.etcd, 1, 3*time.Second, false) }()
	heldInEtcd(t, e.cli, e.p.LockKey(0))
	// The holder's lease is the one its lock key is attached to (the etcd
	// may be shared: ETCD_ENDPOINTS).
	keys, err := e.cli.Get(t.Context(), lock.EtcdPrefix+e.p.LockKey(0), clientv3.WithPrefix())
	if err != nil || len(keys.Kvs) != 1 {
		t.Fatalf("the holder's key: %v, %v", keys, err)
	}
	if _, err := e.cli.Revoke(t.Context(), clientv3.LeaseID(keys.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	err = <-done
	left, takes := e.sold(t)
	if !errors.Is(err, stock.ErrLeaseLost) || left != 5 || takes != 0 {
		t.Errorf("take = %v, %d left, %d takes; want lease lost, 5 left, nothing written", err, left, takes)
	}
}
