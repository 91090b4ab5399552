package lock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/stock"
	"seckill/internal/testkit"
)

// TestFencedStaleHolder is the pause that a lease cannot prevent, through
// the store the fence guards: A takes the shard's lock without renewal,
// reads the stock, and stalls past its lease; B takes the lock with a newer
// token, reads and writes; A wakes and writes its stale result. The store
// refuses A: one unit taken, by B only.
func TestFencedStaleHolder(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testkit.RealRedis(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	fenced := lock.NewFenced(rdb)
	t.Cleanup(func() { fenced.Close() })
	s := stock.NewStore(rdb, nil)
	p := stock.Product{Layout: stock.Layout{ID: time.Now().UnixNano(), Shards: 1, Epoch: 1}, Where: stock.InRedis}
	if err := s.LayOut(t.Context(), p, []int{5}, 5); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stock.Purge(t.Context(), rdb, []int64{p.ID}) })
	take := func(user int64, hold time.Duration) error {
		_, err := s.Take(t.Context(), stock.Request{Product: p, Hooks: order.Faults{Hold: hold}.Hooks(),
			Taker:  stock.RMW{Locked: stock.Locked{Locker: fenced, Lock: lock.Options{TTL: 100 * time.Millisecond, Wait: 5 * time.Second}}},
			Ticket: stock.Ticket{User: user, Order: idgen.ID(1000 + user), Key: "k"}})
		return err
	}
	stale := make(chan error, 1)
	go func() { stale <- take(1, 600*time.Millisecond) }() // A: holds its read past its lease
	deadline := time.Now().Add(5 * time.Second)
	for rdb.Exists(t.Context(), p.LockKey(0)).Val() == 0 { // until A holds the lock
		if time.Now().After(deadline) {
			t.Fatal("A never took the lock")
		}
		time.Sleep(time.Millisecond)
	}
	if err := take(2, 0); err != nil { // B: waits for A's lease to run out
		t.Fatalf("B: %v", err)
	}
	if err := <-stale; !errors.Is(err, stock.ErrLeaseLost) {
		t.Errorf("A's late write: %v, want refused (stock.ErrLeaseLost)", err)
	}
	if levels, err := s.Ledgers().Levels(t.Context(), p); err != nil || levels[0] != 4 {
		t.Errorf("stock %v, %v: want 4, one unit taken, by B only", levels, err)
	}
}
