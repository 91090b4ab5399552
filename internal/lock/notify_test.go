package lock

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// eventually polls cond until it holds, failing the test after patience.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after %v", what, patience)
		}
		time.Sleep(5 * time.Millisecond) // the poll interval
	}
}

func numsub(t *testing.T, rdb *redis.Client, channel string) int64 {
	t.Helper()
	m, err := rdb.PubSubNumSub(t.Context(), channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m[channel]
}

// TestReleaseNoticeWakesLongestWaiter shows that a release publishes a
// notice and that the notice wakes one waiter, the one waiting longest.
func TestReleaseNoticeWakesLongestWaiter(t *testing.T) {
	b := testBackends(t)
	l := NewToken(b.Redis)
	t.Cleanup(func() { l.Close() })
	key := newKey(t, b.Redis)
	ch := releasedChannel(key)

	first, stop1 := l.notices.watch(t.Context(), key)
	defer stop1()
	second, stop2 := l.notices.watch(t.Context(), key)
	defer stop2()
	eventually(t, "subscribed", func() bool { return numsub(t, b.Redis, ch) == 1 })

	lease := acquire(t, l, key, Options{TTL: longTTL})
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Only the release script's PUBLISH can wake these channels: watchers
	// have no backoff of their own.
	select {
	case <-first:
	case <-time.After(patience):
		t.Fatal("the release woke no waiter")
	}
	// One notice was sent, and it has been delivered: to the first waiter.
	if len(second) != 0 {
		t.Error("one release woke two waiters")
	}
}

// TestWaitersShareOneSubscription shows that a Locker's waiters share one
// subscription, that it ends when the last waiter leaves, and that Close
// leaves no goroutine behind.
func TestWaitersShareOneSubscription(t *testing.T) {
	b := testBackends(t)
	if err := b.Redis.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	l := NewToken(b.Redis)
	key := newKey(t, b.Redis)
	ch := releasedChannel(key)

	holder := acquire(t, l, key, Options{TTL: longTTL})
	const waiters = 10
	var wg sync.WaitGroup
	for range waiters {
		wg.Go(func() {
			lease, err := l.Acquire(t.Context(), key, Options{TTL: longTTL, Wait: 30 * time.Second})
			if err != nil {
				t.Error(err)
				return
			}
			if err := lease.Release(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
	eventually(t, "all waiting", func() bool {
		l.notices.mu.Lock()
		defer l.notices.mu.Unlock()
		return len(l.notices.waiters[ch]) == waiters
	})
	if got := numsub(t, b.Redis, ch); got != 1 {
		t.Errorf("%d waiters hold %d subscriptions to %s; want 1", waiters, got, ch)
	}
	if err := holder.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	eventually(t, "unsubscribed", func() bool { return numsub(t, b.Redis, ch) == 0 })

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "back to the goroutines before the Locker", func() bool { return runtime.NumGoroutine() <= before })
}
