package stock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ToldKey is the hash of how many orders of a product's sale the service's
// processes told their buyers of (201, 202), one field per process. The
// audit compares their sum with the rows, the queue and the dead letters,
// so that an acknowledged order that is stored nowhere shows even when the
// units balance (its take lost with it: a failover). Each process writes
// its own count whole, never an increment, so a write Redis lost (a
// failover, a restart) is made good by the process's next.
func ToldKey(product, sale int64) string {
	return "seckill:told:{" + strconv.FormatInt(product, 10) + "}:" + strconv.FormatInt(sale, 10)
}

// toldTTL bounds how long a sale's counts outlive their last write.
const toldTTL = 30 * 24 * time.Hour

// Told is one process's count of the orders of a sale it told of.
type Told struct {
	Product, Sale int64
	N             int64
}

// WriteTold writes the counts of the process named name, in one round trip.
func (lg *Ledgers) WriteTold(ctx context.Context, name string, counts []Told) error {
	if len(counts) == 0 {
		return nil
	}
	_, err := lg.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, c := range counts {
			k := ToldKey(c.Product, c.Sale)
			pipe.HSet(ctx, k, name, c.N)
			pipe.Expire(ctx, k, toldTTL)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing the counts of orders told: %w", err)
	}
	return nil
}

// ToldOf is how many orders of the sale the processes told of, as far as
// their counts reached Redis: a lower bound.
func (lg *Ledgers) ToldOf(ctx context.Context, product, sale int64) (int, error) {
	vals, err := lg.rdb.HVals(ctx, ToldKey(product, sale)).Result()
	if err != nil {
		return 0, fmt.Errorf("reading the orders told of product %d: %w", product, err)
	}
	n := 0
	for _, v := range vals {
		c, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("reading the orders told of product %d: %q: %w", product, v, err)
		}
		n += c
	}
	return n, nil
}
