package stock_test

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/idgen"
	"seckill/internal/redistest"
	"seckill/internal/stock"
)

// The async take queues the order on the shard's stream in the same step
// that takes the unit, with an order id drawn there, exactly as the
// generator would draw it (the id exceeds 2^53, past Lua's integers), and
// indexes it as pending. Run on a real Redis where there is one: Lua's
// number formatting is the server's.
func TestAsyncTakeQueuesTheOrder(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Real(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	s := stock.NewStore(rdb, nil)
	p := stock.Product{Layout: stock.Layout{ID: 900_000_000 + rand.Int64N(1_000_000), Shards: 2, Epoch: 3},
		Where: stock.InRedis, Fallback: true, Sale: 7}
	ctx := t.Context()
	t.Cleanup(func() { stock.Purge(ctx, rdb, []int64{p.ID}) })
	if err := s.LayOut(ctx, p, []int{1, 1}, 2); err != nil {
		t.Fatal(err)
	}
	ids := idgen.NewRedis(rdb, "asynctest", new(idgen.MemoryBlocks))
	slot, err := ids.Slot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Del(ctx, slot.DayKey) })
	taken, err := s.Take(ctx, stock.Request{Product: p, Mode: stock.Async, IDs: ids,
		Ticket: stock.Ticket{User: 42, Key: "k-42"}})
	if err != nil {
		t.Fatal(err)
	}
	seq, _ := rdb.HGet(ctx, slot.DayKey, "seq").Int64()
	if want := idgen.Compose(slot.Secs, uint32(seq)); taken.Order != want || taken.Order < 1<<53 {
		t.Errorf("order id %d, want %d (above 2^53)", taken.Order, want)
	}
	msgs, err := rdb.XRange(ctx, p.StreamKey(taken.Shard), "-", "+").Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("the shard's stream: %v, %v; want one order", msgs, err)
	}
	v := msgs[0].Values
	if v["id"] != taken.Order.String() || v["user"] != "42" || v["sale"] != "7" || v["key"] != "k-42" {
		t.Errorf("queued %v", v)
	}
	if got, _ := rdb.HGet(ctx, stock.PendingKey(taken.Order.Time()), taken.Order.String()).Result(); got == "" {
		t.Error("the order is not indexed as pending")
	}
	if ok, _ := rdb.SIsMember(ctx, stock.StreamsKey, p.StreamKey(taken.Shard)).Result(); !ok {
		t.Error("the stream is not registered for the consumers")
	}
	q, err := s.Queued(ctx, p.Layout)
	if err != nil || q[taken.Shard] != 1 {
		t.Errorf("queued %v, %v", q, err)
	}
	t.Cleanup(func() {
		rdb.SRem(ctx, stock.StreamsKey, p.StreamKey(taken.Shard))
		rdb.HDel(ctx, stock.PendingKey(taken.Order.Time()), taken.Order.String())
	})
}

// The async take draws its order id within the block reserved for the day,
// as the generator does: with the day key lost between two takes of the
// same second (Redis restarted empty), the second take's id is past the
// first's, and a take that found no block wrote nothing before it got one.
func TestAsyncTakeAfterTheDayKeyIsLost(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Real(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	s := stock.NewStore(rdb, nil)
	p := stock.Product{Layout: stock.Layout{ID: 900_000_000 + rand.Int64N(1_000_000), Shards: 1, Epoch: 1},
		Where: stock.InRedis, Sale: 1}
	ctx := t.Context()
	t.Cleanup(func() { stock.Purge(ctx, rdb, []int64{p.ID}) })
	if err := s.LayOut(ctx, p, []int{10}, 10); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ids := idgen.NewRedis(rdb, "asynctest-"+strconv.FormatInt(p.ID, 10), new(idgen.MemoryBlocks),
		idgen.WithBlockSize(3), idgen.WithClock(func() time.Time { return now }))
	slot, err := ids.Slot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rdb.Del(ctx, slot.DayKey)
		rdb.SRem(ctx, stock.StreamsKey, p.StreamKey(0))
		rdb.Del(ctx, stock.PendingKey(now))
	})
	take := func(user int64) idgen.ID {
		taken, err := s.Take(ctx, stock.Request{Product: p, Mode: stock.Async, IDs: ids,
			Ticket: stock.Ticket{User: user, Key: "k-" + strconv.FormatInt(user, 10)}})
		if err != nil {
			t.Fatal(err)
		}
		return taken.Order
	}
	var before []idgen.ID
	for user := range int64(4) { // past one block of 3
		before = append(before, take(user))
	}
	if err := rdb.Del(ctx, slot.DayKey).Err(); err != nil {
		t.Fatal(err)
	}
	after := take(10)
	if last := slices.Max(before); after <= last {
		t.Errorf("after the day key was lost: %d (seq %d), not past %d (seq %d)", after, after.Seq(), last, last.Seq())
	}
	// Blocks of 3: (0, 3] and (3, 6] before the loss, (6, 9] after it.
	if after.Seq() != 7 {
		t.Errorf("after the loss: seq %d; want 7, the first of the block past the two reserved before", after.Seq())
	}
	if levels, err := s.Levels(ctx, p); err != nil || levels[0] != 5 {
		t.Errorf("stock %v (%v), want 5 of 10 left after 5 takes", levels, err)
	}
}
