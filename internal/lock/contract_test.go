package lock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/testkit"
)

// hold is one stay in the critical section, from the moment Acquire
// returned to the moment Release was called: always inside the time the
// lock was really held, so two holds that overlap prove two holders.
type hold struct {
	start, end time.Time
	proc       int // the OS process it ran in, for the cross-process test
}

// overlaps returns the pairs of holds that were in the critical section at
// the same time, each pair once.
func overlaps(holds []hold) [][2]hold {
	hs := slices.Clone(holds)
	slices.SortFunc(hs, func(a, b hold) int { return a.start.Compare(b.start) })
	var pairs [][2]hold
	for i, a := range hs {
		for _, b := range hs[i+1:] {
			if !b.start.Before(a.end) {
				break // sorted by start: no later hold begins before a ends
			}
			pairs = append(pairs, [2]hold{a, b})
		}
	}
	return pairs
}

// contendConfig is one round of the contract: workers goroutines, released
// at once, each taking the lock rounds times around a read-modify-write.
type contendConfig struct {
	workers, rounds int
	hold            time.Duration // between the GET and the SET: the window for a lost update
	proc            int
}

// contend runs the contract's critical section: acquire (waiting), GET the
// counter, pause, SET it one higher, release. The GET-pause-SET is not
// atomic on purpose: only the lock stands between it and a lost update. It
// returns the holds; the counter's final value is in Redis.
func contend(ctx context.Context, l Locker, rdb redis.UniversalClient, key, counter string, c contendConfig) ([]hold, error) {
	var (
		mu    sync.Mutex
		holds []hold
		errs  []error
		wg    sync.WaitGroup
	)
	gate := make(chan struct{})
	for range c.workers {
		wg.Go(func() {
			<-gate
			for range c.rounds {
				h, err := criticalSection(ctx, l, rdb, key, counter, c.hold)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					h.proc = c.proc
					holds = append(holds, h)
				}
				mu.Unlock()
			}
		})
	}
	close(gate)
	wg.Wait()
	return holds, errors.Join(errs...)
}

func criticalSection(ctx context.Context, l Locker, rdb redis.UniversalClient, key, counter string, pause time.Duration) (hold, error) {
	lease, err := l.Acquire(ctx, key, Options{TTL: 10 * time.Second, Wait: 30 * time.Second})
	if err != nil {
		return hold{}, err
	}
	h := hold{start: time.Now()}
	n, err := rdb.Get(ctx, counter).Int()
	if err != nil && !errors.Is(err, redis.Nil) {
		return hold{}, err
	}
	time.Sleep(pause) // the work inside the critical section, not a wait for a condition
	if err := rdb.Set(ctx, counter, n+1, 0).Err(); err != nil {
		return hold{}, err
	}
	h.end = time.Now()
	if err := lease.Release(ctx); err != nil {
		return hold{}, err
	}
	return h, nil
}

// TestLockContract runs one body against every registered strategy: many
// goroutines released at once increment a shared Redis counter with a
// non-atomic GET and SET inside the lock. A safe lock loses no increment
// and never has two holders at once; none loses increments every time.
func TestLockContract(t *testing.T) {
	for _, s := range Strategies() {
		t.Run(s.Name, func(t *testing.T) { lockContract(t, s.Name, strategyBackends(t, s.Name)) })
	}
}

// TestLockContractCluster runs the contract with the main Redis a Redis
// Cluster (testkit.NewRedisCluster): the lock key, its fencing counter and its
// release channel share the key's slot; the counter is in another.
func TestLockContractCluster(t *testing.T) {
	c := testkit.NewRedisCluster(t)
	t.Logf("cluster: %s", c.Kind())
	for _, s := range Strategies() {
		t.Run(s.Name, func(t *testing.T) {
			b := strategyBackends(t, s.Name)
			b.Redis = c.Client
			lockContract(t, s.Name, b)
		})
	}
}

func lockContract(t *testing.T, name string, b Backends) {
	const workers, rounds = 24, 2
	l := newLocker(t, name, b)
	key, counter := newKey(t, b.Redis), newKey(t, b.Redis)

	holds, err := contend(t.Context(), l, b.Redis, key, counter, contendConfig{workers: workers, rounds: rounds, hold: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Redis.Get(t.Context(), counter).Int()
	if err != nil {
		t.Fatal(err)
	}
	over := overlaps(holds)
	t.Logf("%d acquisitions, counter %d, %d overlapping pairs", len(holds), got, len(over))

	if name == "none" {
		// 24 goroutines start together and each holds its read for
		// 5ms: they cannot all run one after the other.
		if got >= len(holds) || len(over) == 0 {
			t.Errorf("none: counter %d after %d increments, %d overlaps; want lost updates and overlaps", got, len(holds), len(over))
		}
		return
	}
	if got != workers*rounds {
		t.Errorf("counter = %d after %d increments: %d updates lost", got, workers*rounds, workers*rounds-got)
	}
	if len(over) > 0 {
		t.Errorf("%d pairs of holders overlapped, e.g. %v", len(over), over[0])
	}
}
