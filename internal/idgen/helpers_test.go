package idgen_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"seckill/internal/idgen"
	"seckill/internal/testkit"
)

// backend is one Redis server that a test body runs against.
type backend struct {
	name string
	// ids is how many IDs TestRedisUnique takes from it. miniredis builds
	// a new Lua interpreter for every EVAL, about 200µs, so 100,000 would
	// take it most of a minute under -race.
	ids int
	// open returns two independent clients of the server, as two processes
	// would hold, and a prefix no other test uses.
	open func(t testing.TB) (a, b *redis.Client, prefix string)
}

// backends returns miniredis, which runs everywhere, and a real Redis: the
// one REDIS_ADDR names, else a redis-server of the test's own when one is on
// PATH.
func backends() []backend {
	return []backend{
		{"miniredis", 10_000, func(t testing.TB) (*redis.Client, *redis.Client, string) {
			mr := miniredis.RunT(t)
			return newClient(t, mr.Addr()), newClient(t, mr.Addr()), "test"
		}},
		{"redis", 100_000, func(t testing.TB) (*redis.Client, *redis.Client, string) {
			addr := realRedis(t)
			return newClient(t, addr), newClient(t, addr), "idgen-test-" + rand.Text()
		}},
	}
}

// realRedis returns the address of a real Redis (see testkit.RealRedis), or
// skips the test when there is none: the embedded Redis it would fall back
// to is miniredis, which the miniredis run covers already.
func realRedis(t testing.TB) string {
	t.Helper()
	if os.Getenv("REDIS_ADDR") == "" && !testkit.HaveRedisServer() {
		testkit.Skip(t, testkit.NoRedisServer, "no real Redis: REDIS_ADDR is unset and redis-server is not on PATH")
	}
	return testkit.RealRedis(t).Addr()
}

func newClient(t testing.TB, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// dayKey is the day key the package documents.
func dayKey(prefix string, t time.Time) string {
	return "ids:" + prefix + ":" + t.UTC().Format("2006:01:02")
}

// setSeq writes the day key as a Redis that issued seq and holds no block
// would hold it.
func setSeq(t testing.TB, rdb *redis.Client, key string, seq uint64) {
	t.Helper()
	if err := rdb.HSet(t.Context(), key, "seq", seq).Err(); err != nil {
		t.Fatal(err)
	}
}

// drawn reads the day key's last sequence number issued.
func drawn(t testing.TB, rdb *redis.Client, key string) uint64 {
	t.Helper()
	n, err := rdb.HGet(t.Context(), key, "seq").Uint64()
	if err != nil {
		t.Fatalf("reading %s's seq: %v", key, err)
	}
	return n
}

// countingBlocks counts the reservations it passes on.
type countingBlocks struct {
	idgen.Blocks
	n atomic.Int64
}

func (c *countingBlocks) Reserve(ctx context.Context, key string, floor uint64, size uint32) (uint64, uint64, error) {
	c.n.Add(1)
	return c.Blocks.Reserve(ctx, key, floor, size)
}

// deleteDayKeys deletes, when the test ends, the day keys of prefix for the
// given times' days, and for the days around the end of the test: yesterday,
// today and tomorrow, so that a run on the real clock that crosses midnight
// leaves none behind either.
func deleteDayKeys(t testing.TB, rdb *redis.Client, prefix string, times ...time.Time) {
	t.Cleanup(func() {
		now := time.Now()
		times := append(times, now.AddDate(0, 0, -1), now, now.AddDate(0, 0, 1))
		keys := make([]string, len(times))
		for i, tm := range times {
			keys[i] = dayKey(prefix, tm)
		}
		// The test's context is gone by now.
		if err := rdb.Del(context.Background(), keys...).Err(); err != nil {
			t.Errorf("deleting %v: %v", keys, err)
		}
	})
}

// releaseAtOnce starts workers goroutines, releases them together by
// closing a channel, and has each call next n times. It returns every
// worker's results in the order that worker got them.
func releaseAtOnce[T any](t testing.TB, workers, n int, next func(worker int) (T, error)) [][]T {
	t.Helper()
	out := make([][]T, workers)
	errs := make([]error, workers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			got := make([]T, 0, n)
			<-start
			for range n {
				v, err := next(w)
				if err != nil {
					errs[w] = err
					return
				}
				got = append(got, v)
			}
			out[w] = got
		})
	}
	close(start)
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", w, err)
		}
	}
	return out
}

// checkUniqueAndIncreasing fails the test unless no value occurs twice
// among all workers' results and each worker's results strictly increase.
func checkUniqueAndIncreasing[T cmp.Ordered](t testing.TB, perWorker [][]T) {
	t.Helper()
	seen := make(map[T]int)
	total := 0
	for w, vs := range perWorker {
		for i, v := range vs {
			if other, dup := seen[v]; dup {
				t.Fatalf("%v issued twice: to worker %d and worker %d", v, other, w)
			}
			seen[v] = w
			if i > 0 && vs[i-1] >= v {
				t.Fatalf("worker %d: %v followed %v", w, v, vs[i-1])
			}
		}
		total += len(vs)
	}
	t.Logf("%d ids from %d workers, all unique, each worker's increasing", total, len(perWorker))
}

// clock is a settable clock that counts its readings.
type clock struct {
	mu    sync.Mutex
	t     time.Time
	reads int
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *clock) Reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

func mustParse(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
