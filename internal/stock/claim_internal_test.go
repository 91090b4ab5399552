package stock

import (
	"errors"
	"testing"
	"time"

	"seckill/internal/idgen"
	"seckill/internal/testkit"
)

// claimProduct is a product of its own on c, of shards shards of 5 units,
// purged at the end.
func claimProduct(t *testing.T, c *testkit.RedisCluster, s *Store, base int64, shards int) Product {
	t.Helper()
	p := Product{Layout: Layout{ID: base + time.Now().UnixNano()%1_000_000, Shards: shards, Epoch: 1}, Where: InRedis, Fallback: true}
	t.Cleanup(func() { _ = Purge(t.Context(), c.Client, []int64{p.ID}) })
	levels := make([]int, shards)
	for i := range levels {
		levels[i] = 5
	}
	if err := s.LayOut(t.Context(), p, levels, 5*shards); err != nil {
		t.Fatal(err)
	}
	return p
}

// The windows of a retry with the same idempotency key, on a cluster
// (found in review). A retry takes its first attempt's claim over: the
// claim then carries the retry's time and order, so that another purchase
// does not find it stale while the retry's take runs (two takes for one
// buyer), and the retry's give-back forgets it (the buyer refused for a
// claim window). And the reconciler's SettleBuyers, working from a ledger
// read before a give-back, does not turn a retry's claim into the record
// of the take given back, which would hide the retry's take.
func TestClaimRetries(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	s := NewStore(c.Client, nil)
	ctx := t.Context()
	oneTake := func(t *testing.T, p Product) {
		t.Helper()
		if es, err := s.Ledgers().Entries(ctx, p.Layout); err != nil || len(es) > 1 {
			t.Errorf("the buyer holds %d takes (%v), want at most 1", len(es), err)
		}
	}

	t.Run("a retry's claim is not found stale during its take", func(t *testing.T) {
		p := claimProduct(t, c, s, 7_000_000, 2)
		const user = 42
		first := Ticket{User: user, Order: idgen.ID(1001), Key: "kA"}
		c.Client.Set(ctx, p.BuyerKey(user), claimOf(first, time.Now().Add(-DefaultClaimWindow+50*time.Millisecond)), 0)
		retry := Ticket{User: user, Order: idgen.ID(1002), Key: "kA"}
		if _, err := s.claim(ctx, p, retry); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the first attempt's claim time is now past the window
		_, err := s.Take(ctx, Request{Product: p, Taker: Lua{}, Ticket: Ticket{User: user, Order: idgen.ID(2001), Key: "kB"}})
		if err == nil {
			t.Error("another purchase took while the retry's take ran")
		}
		w := s.flags.word(p.ID)
		_, _ = s.takeAny(ctx, Request{Product: p, Taker: Lua{}, Ticket: retry}, w, w.Load())
		oneTake(t, p)
	})

	t.Run("a retry's give-back forgets its claim", func(t *testing.T) {
		p := claimProduct(t, c, s, 8_000_000, 2)
		const user = 43
		c.Client.Set(ctx, p.BuyerKey(user), claimOf(Ticket{User: user, Order: idgen.ID(1001), Key: "kA"}, time.Now()), 0)
		r := Request{Product: p, Taker: Lua{}, Ticket: Ticket{User: user, Order: idgen.ID(1002), Key: "kA"}}
		tk, err := s.Take(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := s.GiveBack(ctx, r, tk); err != nil || !back {
			t.Fatal(back, err)
		}
		_, err = s.Take(ctx, Request{Product: p, Taker: Lua{}, Ticket: Ticket{User: user, Order: idgen.ID(3001), Key: "kC"}})
		if err != nil {
			t.Errorf("a purchase after the give-back: %v, want a take", err)
		}
		if errors.Is(err, ErrInFlight) {
			t.Error("the buyer is refused as in progress after the give-back")
		}
	})

	t.Run("SettleBuyers from an old ledger leaves a retry's claim", func(t *testing.T) {
		p := claimProduct(t, c, s, 9_000_000, 3)
		const user = 44
		first := Request{Product: p, Taker: Lua{}, Ticket: Ticket{User: user, Order: idgen.ID(1001), Key: "k"}}
		tk, err := s.Take(ctx, first)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := s.Ledgers().Entries(ctx, p.Layout)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := s.GiveBack(ctx, first, tk); err != nil || !back {
			t.Fatal(back, err)
		}
		retry := Ticket{User: user, Order: idgen.ID(1002), Key: "k"}
		if _, err := s.claim(ctx, p, retry); err != nil {
			t.Fatal(err)
		}
		if err := s.SettleBuyers(ctx, p.Layout, snap); err != nil {
			t.Fatal(err)
		}
		w := s.flags.word(p.ID)
		if _, err := s.takeAny(ctx, Request{Product: p, Taker: Lua{}, Ticket: retry}, w, w.Load()); err != nil {
			t.Fatal(err)
		}
		_, _ = s.Take(ctx, Request{Product: p, Taker: Lua{}, Ticket: Ticket{User: user, Order: idgen.ID(2001), Key: "kB"}})
		oneTake(t, p)
	})
}
