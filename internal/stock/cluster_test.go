package stock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/stock"
	"seckill/internal/testkit"
	"seckill/internal/testkit/testenv"
)

// clusterProduct is a product of its own on a cluster that other tests may
// share (REDIS_CLUSTER), its keys purged when the test ends.
func clusterProduct(t *testing.T, rdb redis.UniversalClient, shards int) stock.Product {
	t.Helper()
	id := 1_000_000 + rand.Int64N(1<<40)
	t.Cleanup(func() { _ = stock.Purge(context.Background(), rdb, []int64{id}) })
	return stock.Product{Layout: stock.Layout{ID: id, Shards: shards, Epoch: 1}, Where: stock.InRedis, Fallback: true}
}

// On a cluster, a product's shards are in slots of their own, and each
// shard's stock, ledger, fence, lock, stream and deadline set share its
// slot: one script may touch them all.
func TestClusterSlots(t *testing.T) {
	l := stock.Layout{ID: 42, Shards: 5, Epoch: 7}
	seen := map[int64]int{}
	for i := range l.Shards {
		s := slot(l.StockKey(i))
		for _, k := range []string{l.LedgerKey(i), l.FenceKey(i), l.LockKey(i), l.StreamKey(i), l.DueKey(i)} {
			if got := slot(k); got != s {
				t.Errorf("%s in slot %d, the shard's stock in %d", k, got, s)
			}
		}
		if j, dup := seen[s]; dup {
			t.Errorf("shards %d and %d share slot %d", j, i, s)
		}
		seen[s] = i
	}
}

// slot is Redis Cluster's slot of key: CRC16 (XMODEM) of its hash tag, or
// of the key when it has none, modulo 16384. Computed here, not asked of a
// server: miniredis answers CLUSTER KEYSLOT with one slot for every key.
func slot(key string) int64 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	var crc uint16
	for i := range len(key) {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int64(crc % 16384)
}

// The stock modes that keep their stock in Redis take on a cluster: every
// unit sold once, to buyers released at once, and one unit per buyer
// although the buyer's key and the shards are on different nodes.
func TestClusterTakes(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	_, db, _ := testenv.Local(t)
	s := stock.NewStore(c.Client, db)
	rmw := stock.RMW{Locked: stock.Locked{Locker: lock.NewToken(c.Client), Lock: lock.Options{TTL: 5e9, Wait: 10e9}}}
	for _, mode := range []struct {
		name  string
		taker stock.Taker
	}{{"lua", stock.Lua{}}, {"rmw", rmw}, {"async", stock.Async{}}} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := t.Context()
			req := func(p stock.Product, user int64, key string) stock.Request {
				return stock.Request{Product: p, Taker: mode.taker,
					Ticket: stock.Ticket{User: user, Order: idgen.ID(rand.Int64N(1 << 50)), Key: key}}
			}
			run := func(n int, r func(i int) stock.Request) (taken []stock.Taken, errs []error) {
				var mu sync.Mutex
				var wg sync.WaitGroup
				gate := make(chan struct{})
				for i := range n {
					wg.Go(func() {
						<-gate
						tk, err := s.Take(ctx, r(i))
						mu.Lock()
						defer mu.Unlock()
						if err != nil {
							errs = append(errs, err)
						} else {
							taken = append(taken, tk)
						}
					})
				}
				close(gate)
				wg.Wait()
				return taken, errs
			}

			t.Run("every unit once", func(t *testing.T) {
				p := clusterProduct(t, c.Client, 3)
				if err := s.LayOut(ctx, p, []int{10, 10, 10}, 30); err != nil {
					t.Fatal(err)
				}
				taken, errs := run(40, func(i int) stock.Request { return req(p, int64(i+1), "k") })
				for _, err := range errs {
					if !errors.Is(err, stock.ErrSoldOut) {
						t.Errorf("a take failed: %v", err)
					}
				}
				counts, err := s.Ledgers().Count(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if len(taken) != 30 || counts.Takes != 30 || counts.Levels[0]+counts.Levels[1]+counts.Levels[2] != 0 {
					t.Errorf("%d taken, %+v; want 30 taken, 30 in the ledgers, none left", len(taken), counts)
				}
			})

			t.Run("one unit per buyer", func(t *testing.T) {
				p := clusterProduct(t, c.Client, 3)
				if err := s.LayOut(ctx, p, []int{10, 10, 10}, 30); err != nil {
					t.Fatal(err)
				}
				keys := []string{"a", "b", "c", "d", "e"}
				taken, errs := run(50, func(i int) stock.Request { return req(p, 7, keys[i%5]+string(rune('0'+i/5))) })
				for _, err := range errs {
					if !errors.Is(err, stock.ErrAlreadyBought) {
						t.Errorf("a take failed: %v, want ErrAlreadyBought", err)
					}
				}
				counts, err := s.Ledgers().Count(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if len(taken) != 1 || counts.Takes != 1 {
					t.Fatalf("%d taken, %d in the ledgers; want 1 for one buyer", len(taken), counts.Takes)
				}
				// The give-back forgets the buyer, who may buy again.
				r := req(p, 7, "again")
				r.Ticket.Order = taken[0].Order
				if back, err := s.GiveBack(ctx, r, taken[0]); err != nil || !back {
					t.Fatalf("give-back: %v %v", back, err)
				}
				if _, err := s.Take(ctx, req(p, 7, "again")); err != nil {
					t.Errorf("a take after the give-back: %v", err)
				}
			})
		})
	}
}

// The slot computed here is Redis's, checked against a real cluster.
func TestSlotIsRedis(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	if c.Kind() == testkit.RedisEmbedded {
		t.Log("miniredis answers CLUSTER KEYSLOT with one slot for every key: checked against the CRC16 check value only")
	}
	if got := slot("123456789"); got != 0x31C3%16384 {
		t.Errorf("slot(123456789) = %d, want the CRC16/XMODEM check value 0x31C3 mod 16384", got)
	}
	if c.Kind() == testkit.RedisEmbedded {
		return
	}
	for _, k := range []string{"seckill:stock:{42_3}:7", "a", "seckill:buyer:{42:9}:7", "{}x"} {
		want, err := c.Client.ClusterKeySlot(t.Context(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := slot(k); got != want {
			t.Errorf("slot(%q) = %d, Redis says %d", k, got, want)
		}
	}
}

// A take whose buyer key missed its settle (the process died, the node was
// lost) is settled by SettleBuyers: an empty key, or the taking purchase's
// own claim, becomes the take's record; another purchase's claim is left.
func TestSettleBuyers(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	_, db, _ := testenv.Local(t)
	s := stock.NewStore(c.Client, db)
	ctx := t.Context()
	p := clusterProduct(t, c.Client, 2)
	if err := s.LayOut(ctx, p, []int{5, 5}, 10); err != nil {
		t.Fatal(err)
	}
	var taken [3]stock.Taken
	for u := range taken {
		tk, err := s.Take(ctx, stock.Request{Product: p, Taker: stock.Lua{}, Ticket: stock.Ticket{User: int64(u + 1), Order: idgen.ID(100 + u), Key: "k" + strconv.Itoa(u)}})
		if err != nil {
			t.Fatal(err)
		}
		taken[u] = tk
	}
	// Buyer 1: the key lost. Buyer 2: its own claim left. Buyer 3: another
	// purchase's claim.
	c.Client.Del(ctx, p.BuyerKey(1))
	c.Client.Set(ctx, p.BuyerKey(2), "claim k1 1", 0)
	c.Client.Set(ctx, p.BuyerKey(3), "claim other 1", 0)
	ledger, err := s.Ledgers().Ledger(ctx, p.Layout)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := s.Ledgers().Entries(ctx, p.Layout)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SettleBuyers(ctx, p.Layout, entries); err != nil {
		t.Fatal(err)
	}
	for u, want := range []string{ledger[1].Order.String(), ledger[2].Order.String(), "claim other 1"} {
		got := c.Client.Get(ctx, p.BuyerKey(int64(u+1))).Val()
		if !strings.HasPrefix(got, want) {
			t.Errorf("buyer %d's key holds %q, want %q…", u+1, got, want)
		}
	}
}
