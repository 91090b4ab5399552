package stock_test

import (
	"math/rand/v2"
	"testing"

	"github.com/redis/go-redis/v9"

	"seckill/internal/idgen"
	"seckill/internal/stock"
	"seckill/internal/testkit"
)

// The async take queues the order on the shard's stream in the same step
// that takes the unit, under the order id drawn for it before (the id
// exceeds 2^53, past Lua's integers, and the script carries it as
// written), and indexes it as pending. Run on a real Redis where there is
// one.
func TestAsyncTakeQueuesTheOrder(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: testkit.RealRedis(t).Addr()})
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
	t.Cleanup(ids.Close)
	id, err := ids.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rdb.Del(ctx, "ids:asynctest:"+id.Time().UTC().Format("2006:01:02")) })
	taken, err := s.Take(ctx, stock.Request{Product: p, Taker: stock.Async{},
		Ticket: stock.Ticket{User: 42, Order: id, Key: "k-42"}})
	if err != nil {
		t.Fatal(err)
	}
	if taken.Order != id || taken.Order < 1<<53 {
		t.Errorf("order id %d, want %d (above 2^53)", taken.Order, id)
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
	if ok, _ := rdb.HExists(ctx, stock.StreamsKey, p.StreamKey(taken.Shard)).Result(); !ok {
		t.Error("the stream is not registered for the consumers")
	}
	q, err := s.Ledgers().Queued(ctx, p.Layout)
	if err != nil || q[taken.Shard] != 1 {
		t.Errorf("queued %v, %v", q, err)
	}
	t.Cleanup(func() {
		rdb.HDel(ctx, stock.StreamsKey, p.StreamKey(taken.Shard))
		rdb.HDel(ctx, stock.PendingKey(taken.Order.Time()), taken.Order.String())
	})
}
