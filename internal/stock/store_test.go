package stock_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"seckill/internal/lock"
	"seckill/internal/stock"
	"seckill/internal/testenv"
)

// newStore returns a store on miniredis and an in-memory SQLite: what is
// tested here is the store's own logic, not the servers'.
func newStore(t *testing.T) (*stock.Store, *redis.Client) {
	t.Helper()
	rdb, db, _ := testenv.Local(t)
	return stock.NewStore(rdb, db), rdb
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		total, n int
		want     []int
	}{
		{7, 5, []int{2, 2, 1, 1, 1}},
		{10, 5, []int{2, 2, 2, 2, 2}},
		{3, 5, []int{1, 1, 1, 0, 0}},
		{0, 2, []int{0, 0}},
		{9, 1, []int{9}},
	} {
		if diff := cmp.Diff(tc.want, stock.Split(tc.total, tc.n)); diff != "" {
			t.Errorf("Split(%d, %d) (-want +got):\n%s", tc.total, tc.n, diff)
		}
	}
}

func TestStockAndLockKeysShareAHashTag(t *testing.T) {
	if s, l := stock.StockKey(42, 3), stock.LockKey(42, 3); s != "seckill:stock:{42_3}" || l != "seckill:lock:{42_3}" {
		t.Errorf("keys %s and %s: want the hash tag {42_3} in both", s, l)
	}
}

func TestTakeEveryUnitThenSoldOut(t *testing.T) {
	for _, mode := range stock.Modes() {
		t.Run(string(mode), func(t *testing.T) {
			s, _ := newStore(t)
			ctx := t.Context()
			p := stock.Product{ID: 1, Shards: 5, Where: mode.Store(), Fallback: true}
			if err := s.Layout(ctx, p, 7); err != nil {
				t.Fatal(err)
			}
			req := func(user int64) stock.Request {
				return stock.Request{Product: p, UserID: user, Mode: mode, Locker: lock.NewLocal()}
			}
			var last stock.Taken
			for u := int64(1); u <= 7; u++ {
				tk, err := s.Take(ctx, req(u))
				if err != nil {
					t.Fatalf("buyer %d: %v", u, err)
				}
				last = tk
			}
			if _, err := s.Take(ctx, req(8)); !errors.Is(err, stock.ErrSoldOut) {
				t.Fatalf("eighth buyer: %v, want ErrSoldOut", err)
			}
			if !s.SoldOut(p.ID) {
				t.Error("the sold-out flag is not set after every shard was found empty")
			}
			levels, err := s.Levels(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]int{0, 0, 0, 0, 0}, levels); diff != "" {
				t.Errorf("levels after selling out (-want +got):\n%s", diff)
			}

			// A unit given back is in its shard again and can be sold.
			if err := s.GiveBack(ctx, req(7), last); err != nil {
				t.Fatal(err)
			}
			if s.SoldOut(p.ID) {
				t.Error("the sold-out flag survived a unit given back")
			}
			if levels, _ = s.Levels(ctx, p); levels[last.Shard] != 1 {
				t.Errorf("levels %v: want the unit back on shard %d", levels, last.Shard)
			}
			if _, err := s.Take(ctx, req(7)); err != nil {
				t.Errorf("buying the unit given back: %v", err)
			}
		})
	}
}

func TestWithoutFallbackOnlyThePickedShard(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	p := stock.Product{ID: 1, Shards: 2, Where: stock.InRedis}
	if err := s.Layout(ctx, p, 1); err != nil { // shard 0 holds the only unit
		t.Fatal(err)
	}
	var soldOut int
	for u := int64(1); u <= 2; u++ {
		_, err := s.Take(ctx, stock.Request{Product: p, UserID: u, Mode: stock.Lua})
		if errors.Is(err, stock.ErrSoldOut) {
			soldOut++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if soldOut != 1 || s.SoldOut(p.ID) {
		t.Errorf("%d buyers told sold out, flag %v: want one refusal from the empty shard and no flag", soldOut, s.SoldOut(p.ID))
	}
}

func TestLuaRefusesASecondPurchase(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	p := stock.Product{ID: 1, Shards: 1, Where: stock.InRedis, Fallback: true}
	if err := s.Layout(ctx, p, 5); err != nil {
		t.Fatal(err)
	}
	req := stock.Request{Product: p, UserID: 9, Mode: stock.Lua}
	tk, err := s.Take(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(ctx, req); !errors.Is(err, stock.ErrAlreadyBought) {
		t.Fatalf("second purchase: %v, want ErrAlreadyBought", err)
	}
	if err := s.GiveBack(ctx, req, tk); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(ctx, req); err != nil {
		t.Errorf("after the give-back forgot the buyer: %v", err)
	}
}

func TestModeMustMatchTheStore(t *testing.T) {
	s, _ := newStore(t)
	p := stock.Product{ID: 1, Shards: 1, Where: stock.InRedis, Fallback: true}
	if err := s.Layout(t.Context(), p, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Take(t.Context(), stock.Request{Product: p, UserID: 1, Mode: stock.DB}); !errors.Is(err, stock.ErrWrongStore) {
		t.Errorf("db mode on a Redis product: %v, want ErrWrongStore", err)
	}
}

func TestHeldLockTimesOut(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	p := stock.Product{ID: 1, Shards: 1, Where: stock.InRedis, Fallback: true}
	if err := s.Layout(ctx, p, 1); err != nil {
		t.Fatal(err)
	}
	locker := lock.NewLocal()
	lease, err := locker.Acquire(ctx, stock.LockKey(1, 0), lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	_, err = s.Take(ctx, stock.Request{Product: p, UserID: 1, Mode: stock.RMW, Locker: locker})
	if !errors.Is(err, stock.ErrLockTimeout) {
		t.Errorf("taking under a held lock with no wait: %v, want ErrLockTimeout", err)
	}
}

func TestLayoutReplacesTheOldShards(t *testing.T) {
	s, rdb := newStore(t)
	ctx := t.Context()
	if err := s.Layout(ctx, stock.Product{ID: 1, Shards: 5, Where: stock.InRedis}, 10); err != nil {
		t.Fatal(err)
	}
	p := stock.Product{ID: 1, Shards: 2, Where: stock.InRedis}
	if err := s.Layout(ctx, p, 3); err != nil {
		t.Fatal(err)
	}
	levels, err := s.Levels(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{2, 1}, levels); diff != "" {
		t.Errorf("levels (-want +got):\n%s", diff)
	}
	if n, _ := rdb.Exists(ctx, stock.StockKey(1, 4)).Result(); n != 0 {
		t.Error("a shard of the old layout is still in Redis")
	}
	// Moving the product to SQL leaves nothing to sell in Redis.
	if err := s.Layout(ctx, stock.Product{ID: 1, Shards: 2, Where: stock.InSQL}, 3); err != nil {
		t.Fatal(err)
	}
	if levels, _ = s.Levels(ctx, p); levels[0]+levels[1] != 0 {
		t.Errorf("Redis still holds %v after the product moved to SQL", levels)
	}
}

// failingRelease wraps a Locker whose releases fail like a lost reply.
type failingRelease struct{ lock.Locker }

type failingLease struct{ lock.Lease }

func (f failingRelease) Acquire(ctx context.Context, key string, opt lock.Options) (lock.Lease, error) {
	l, err := f.Locker.Acquire(ctx, key, opt)
	if err != nil {
		return nil, err
	}
	return failingLease{l}, nil
}

func (f failingLease) Release(ctx context.Context) error {
	f.Lease.Release(ctx)
	return errors.New("i/o timeout")
}

// A release that fails after the write landed must not fail the take: the
// unit left the shard, so the caller must record it (or give it back).
func TestReleaseErrorAfterTheWriteKeepsTheUnitTaken(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	p := stock.Product{ID: 1, Shards: 1, Where: stock.InRedis, Fallback: true}
	if err := s.Layout(ctx, p, 5); err != nil {
		t.Fatal(err)
	}
	tk, err := s.Take(ctx, stock.Request{Product: p, UserID: 1, Mode: stock.RMW, Locker: failingRelease{lock.NewLocal()}})
	if err != nil {
		t.Fatalf("take with a failing release: %v, want the unit taken", err)
	}
	if tk.ReleaseErr == nil {
		t.Error("the failed release is not reported")
	}
	if levels, _ := s.Levels(ctx, p); levels[0] != 4 {
		t.Errorf("levels %v, want 4 left", levels)
	}
}

// A unit given back under a fenced lock goes through the fence: a holder
// paused with an older token cannot write its stale result over it.
func TestFencedGiveBackShutsOutAStaleHolder(t *testing.T) {
	s, rdb := newStore(t)
	ctx := t.Context()
	p := stock.Product{ID: 1, Shards: 1, Where: stock.InRedis, Fallback: true}
	if err := s.Layout(ctx, p, 5); err != nil {
		t.Fatal(err)
	}
	fenced := lock.NewFenced(rdb)
	t.Cleanup(func() { fenced.Close() })
	req := stock.Request{Product: p, UserID: 1, Mode: stock.RMW, Locker: fenced}
	taken, err := s.Take(ctx, req) // stock 4; its order will "fail"
	if err != nil {
		t.Fatal(err)
	}
	// A stale holder: reads 4 with its token, then loses its lease.
	key := stock.StockKey(1, 0)
	stale, err := fenced.Acquire(ctx, stock.LockKey(1, 0), lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := lock.FencedGet(ctx, rdb, key, stale.Token()); err != nil || v != "4" {
		t.Fatalf("stale holder reads %q, %v", v, err)
	}
	stale.Release(ctx)
	if err := s.GiveBack(ctx, req, taken); err != nil {
		t.Fatal(err)
	}
	if err := lock.FencedSet(ctx, rdb, key, 3, stale.Token()); !errors.Is(err, lock.ErrStaleToken) {
		t.Errorf("the stale holder's write after the give-back: %v, want ErrStaleToken", err)
	}
	if levels, _ := s.Levels(ctx, p); levels[0] != 5 {
		t.Errorf("levels %v, want the 5 units back", levels)
	}
}

// giveBackDuring gives a unit back to shard 1, which the purchase has already
// found empty, as it moves on to shard 0: another request of the process
// doing so at that instant.
type giveBackDuring struct {
	lock.Locker
	once  sync.Once
	store *stock.Store
	p     stock.Product
}

func (g *giveBackDuring) Acquire(ctx context.Context, key string, opt lock.Options) (lock.Lease, error) {
	if key == stock.LockKey(g.p.ID, 0) {
		g.once.Do(func() {
			if err := g.store.GiveBack(ctx, stock.Request{Product: g.p, UserID: 99, Mode: stock.Lua}, stock.Taken{Shard: 1}); err != nil {
				panic(err)
			}
		})
	}
	return g.Locker.Acquire(ctx, key, opt)
}

// A purchase that finds every shard empty must not set the sold-out flag
// over a unit that came back during its scan.
func TestSoldOutFlagDoesNotHideAUnitGivenBackMidScan(t *testing.T) {
	s, _ := newStore(t)
	ctx := t.Context()
	p := stock.Product{ID: 1, Shards: 2, Where: stock.InRedis, Fallback: true}
	if err := s.Layout(ctx, p, 0); err != nil {
		t.Fatal(err)
	}
	locker := &giveBackDuring{Locker: lock.NewLocal(), store: s, p: p}
	// A new product's counter starts its first purchase at shard 1, then
	// falls back to shard 0; the unit reaches shard 1 in between.
	if _, err := s.Take(ctx, stock.Request{Product: p, UserID: 1, Mode: stock.RMW, Locker: locker}); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("the scan: %v, want ErrSoldOut (both shards were empty when read)", err)
	}
	if s.SoldOut(p.ID) {
		t.Fatal("the flag is set although a unit came back during the scan")
	}
	if _, err := s.Take(ctx, stock.Request{Product: p, UserID: 2, Mode: stock.RMW, Locker: lock.NewLocal()}); err != nil {
		t.Errorf("the unit given back cannot be bought: %v", err)
	}
}
