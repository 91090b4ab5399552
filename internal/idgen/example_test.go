package idgen_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"seckill/internal/idgen"
)

func Example() {
	mr, err := miniredis.Run() // a real Redis in the service
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	// A fixed clock keeps the output stable; the service leaves the default.
	now := time.Date(2026, 11, 22, 10, 30, 15, 0, time.UTC)
	// Blocks of sequence numbers are reserved in SQL in the service
	// (SQLBlocks); memory will do for one process.
	orders := idgen.NewRedis(rdb, "order", new(idgen.MemoryBlocks), idgen.WithClock(func() time.Time { return now }))

	id, err := orders.Next(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(id, id.Time(), id.Seq(), mr.Keys())

	b, err := json.Marshal(struct {
		ID idgen.ID `json:"id"`
	}{id})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(b))
	// Output:
	// 662920535620976641 2026-11-22 10:30:15 +0000 UTC 1 [ids:order:2026:11:22]
	// {"id":"662920535620976641"}
}
