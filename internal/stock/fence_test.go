package stock

import (
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// The fence of a shard, script by script: a read records its token, and
// every read, write or give-back with an older token is refused from then
// on. Reading through the fence, not only writing, is what makes the
// read-modify-write safe: if only writes were checked, A (token 1) could
// read, B (token 2) read the same value, A write, and B write its stale
// result over A's.
func TestFenceRefusesOlderTokens(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	s := NewStore(rdb, nil)
	p := Product{Layout: Layout{ID: 1, Shards: 1, Epoch: 1}, Where: InRedis}
	ctx := t.Context()
	if _, _, err := s.read(ctx, p, 0, 1); !errors.Is(err, ErrNotLaidOut) {
		t.Fatalf("reading an absent shard: %v, want ErrNotLaidOut", err)
	}
	if err := s.LayOut(ctx, p, []int{5}, 5); err != nil {
		t.Fatal(err)
	}
	write := func(value int, token uint64, user int64) error {
		keys := []string{p.StockKey(0), p.FenceKey(0), p.LedgerKey(0), p.LockKey(0), p.BuyerKey(user)}
		rec := newEntry(Ticket{User: user, Order: 100, Key: "k"}, 0, time.Now()).record()
		res, err := rmwWriteScript.Run(ctx, rdb, keys, value, token, user, rec, "", "").Slice()
		if err != nil {
			return err
		}
		_, err = s.reply(p, 0, user, res)
		return err
	}
	if n, _, err := s.read(ctx, p, 0, 1); err != nil || n != 5 {
		t.Fatalf("A reads: %d, %v", n, err)
	}
	if n, _, err := s.read(ctx, p, 0, 2); err != nil || n != 5 {
		t.Fatalf("B reads: %d, %v", n, err)
	}
	if err := write(4, 1, 1); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("A writes after B read: %v, want ErrLeaseLost", err)
	}
	if _, _, err := s.read(ctx, p, 0, 1); !errors.Is(err, ErrLeaseLost) {
		t.Errorf("A reads after B read: %v, want ErrLeaseLost", err)
	}
	if err := write(4, 2, 2); err != nil {
		t.Errorf("B writes: %v", err)
	}
	if err := write(3, 2, 3); err != nil {
		t.Errorf("B's token again (the same holder): %v", err)
	}
	if v, _ := rdb.Get(ctx, p.StockKey(0)).Int(); v != 3 {
		t.Errorf("stock %d, want B's 3", v)
	}
	// A give-back through the fence with an older token is refused too.
	keys := []string{p.StockKey(0), p.FenceKey(0), p.LedgerKey(0), p.BuyerKey(3)}
	if n, err := giveBackScript.Run(ctx, rdb, keys, 3, "100", 1).Int(); err != nil || n != replyStale {
		t.Errorf("a give-back with a stale token: %d, %v; want refused", n, err)
	}
}
