package lock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/lock"
)

// A strategy is picked by name from the ladder; the lease says, through
// lock.Lost, when a watchdog found its lock gone.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()

	locker, err := lock.New("watchdog", lock.Backends{Redis: rdb})
	if err != nil {
		panic(err)
	}
	if c, ok := locker.(io.Closer); ok {
		defer c.Close() // ends the subscription that wakes waiters
	}

	lease, err := locker.Acquire(ctx, "seckill:lock:{42_0}", lock.Options{TTL: time.Second, Wait: 2 * time.Second})
	if errors.Is(err, lock.ErrNotObtained) {
		fmt.Println("busy, try later")
		return
	}
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)

	select {
	case <-lock.Lost(lease):
		fmt.Println("lock lost: stop before writing")
	default:
		fmt.Println("still held: write")
	}
}

// The reentrant strategy knows owners by the context: the same owner may
// lock again, and releases as often.
func ExampleWithOwner() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	locker := lock.NewReentrant(rdb)
	defer locker.Close()

	ctx = lock.WithOwner(ctx, "order-7")
	outer, err := locker.Acquire(ctx, "seckill:lock:{42_0}", lock.Options{})
	if err != nil {
		panic(err)
	}
	defer outer.Release(ctx)
	inner, err := locker.Acquire(ctx, "seckill:lock:{42_0}", lock.Options{}) // no wait: already ours
	if err != nil {
		panic(err)
	}
	defer inner.Release(ctx)
}
