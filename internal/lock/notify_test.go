package lock

import (
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/testkit"
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

func numsub(t *testing.T, rdb redis.UniversalClient, channel string) int64 {
	t.Helper()
	m, err := rdb.PubSubNumSub(t.Context(), channel).Result()
	if err != nil {
		t.Fatal(err)
	}
	return m[channel]
}

// woken reports whether w holds a wake-up, without taking it.
func woken(w *waiter) bool { return len(w.wake) > 0 }

// queueHas reports whether key's queue exists and satisfies cond, read
// under the notices' mutex.
func (n *notices) queueHas(key string, cond func(*queue) bool) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	q := n.queues[key]
	return q != nil && cond(q)
}

// queued joins waiters to key's queue by hand, in order, and returns them
// once the subscription is confirmed and the attempt its confirmation asks
// of the first waiter is over (as a failed one), so that from then on only
// releases wake them. Their test has no backoff: only wake-ups move them.
func queued(t *testing.T, l *Token, rdb redis.UniversalClient, key string, count int) []*waiter {
	t.Helper()
	ch := releasedChannel(key)
	ws := make([]*waiter, count)
	for i := range ws {
		ws[i] = l.notices.join(t.Context(), key)
		if ws[i] == nil {
			t.Fatal("join: no subscription")
		}
		t.Cleanup(func() {
			// Unless the test made it leave already: a waiter leaves once.
			if l.notices.queueHas(key, func(q *queue) bool { return slices.Contains(q.waiters, ws[i]) }) {
				l.notices.leave(t.Context(), key, ws[i])
			}
		})
	}
	eventually(t, "subscribed", func() bool { return numsub(t, rdb, ch) == 1 })
	select {
	case <-ws[0].wake:
		l.notices.tried(key, ws[0], false)
	case <-time.After(patience):
		t.Fatal("the subscription's confirmation woke no waiter")
	}
	return ws
}

// TestReleaseNoticeWakesLongestWaiter shows that a release by another
// process publishes a notice and that the notice wakes one waiter, the one
// waiting longest.
func TestReleaseNoticeWakesLongestWaiter(t *testing.T) {
	b := testBackends(t)
	l, other := NewToken(b.Redis), NewToken(b.Redis) // other plays another process
	t.Cleanup(func() { l.Close(); other.Close() })
	key := newKey(t, b.Redis)
	ws := queued(t, l, b.Redis, key, 2)

	lease := acquire(t, other, key, Options{TTL: longTTL})
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Only the release script's PUBLISH can wake them now.
	eventually(t, "woken by the notice", func() bool { return woken(ws[0]) })
	// One notice was sent, and it has been delivered: to the first waiter.
	if woken(ws[1]) {
		t.Error("one release woke two waiters")
	}
}

// TestOwnReleaseWakesNextWaiterAtOnce shows that a release wakes the
// releasing Locker's next waiter before Release returns, without waiting
// for the notice to come back from Redis, and that the notice, when it
// comes back, wakes nobody else.
func TestOwnReleaseWakesNextWaiterAtOnce(t *testing.T) {
	b := testBackends(t)
	l := NewToken(b.Redis)
	t.Cleanup(func() { l.Close() })
	key := newKey(t, b.Redis)
	lease := acquire(t, l, key, Options{TTL: longTTL})
	ws := queued(t, l, b.Redis, key, 2)

	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !woken(ws[0]) {
		t.Fatal("Release returned and its Locker's first waiter is not woken")
	}
	eventually(t, "past the echo", func() bool {
		return l.notices.queueHas(key, func(q *queue) bool { return len(q.echoes) == 0 })
	})
	if woken(ws[1]) {
		t.Error("the echo of the release woke a second waiter")
	}
}

// TestWaiterWokenBeforeReleaseTriesAgain shows that a waiter woken as its
// Locker sends a release, whose attempt reaches Redis before the release
// and fails, is woken again once the release is done, whichever ends first.
func TestWaiterWokenBeforeReleaseTriesAgain(t *testing.T) {
	b := testBackends(t)
	l := NewToken(b.Redis)
	t.Cleanup(func() { l.Close() })
	key := newKey(t, b.Redis)
	ws := queued(t, l, b.Redis, key, 1)
	n, w := l.notices, ws[0]
	for _, attemptEndsFirst := range []bool{true, false} {
		n.releasing(key, "payload")
		if !woken(w) {
			t.Fatal("a release being sent woke nobody")
		}
		<-w.wake
		if attemptEndsFirst {
			n.tried(key, w, false) // overtook the release: still held
			n.released(key, "payload", true)
		} else {
			n.released(key, "payload", true)
			n.tried(key, w, false)
		}
		if !woken(w) {
			t.Fatalf("attempt ended first: %v; the failed waiter was not woken again after the release", attemptEndsFirst)
		}
		<-w.wake
		n.tried(key, w, false)
	}
}

// TestNewcomerQueuesBehindWokenWaiter shows that an Acquire arriving while
// a woken waiter is on its way to the lock does not try before it, that
// the wake-up passes to the newcomer when the woken waiter leaves without
// the lock, and that Wait 0 still fails fast with one attempt of its own.
func TestNewcomerQueuesBehindWokenWaiter(t *testing.T) {
	b := testBackends(t)
	l := NewToken(b.Redis)
	t.Cleanup(func() { l.Close() })
	key := newKey(t, b.Redis)
	lease := acquire(t, l, key, Options{TTL: longTTL})
	ws := queued(t, l, b.Redis, key, 1)
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !woken(ws[0]) {
		t.Fatal("the release woke nobody")
	}

	got := make(chan error, 1)
	go func() {
		lease, err := l.Acquire(t.Context(), key, Options{TTL: longTTL, Wait: patience})
		if err == nil {
			err = lease.Release(t.Context())
		}
		got <- err
	}()
	eventually(t, "queued", func() bool {
		return l.notices.queueHas(key, func(q *queue) bool { return len(q.waiters) == 2 })
	})
	if n := b.Redis.Exists(t.Context(), key).Val(); n != 0 {
		t.Fatal("the newcomer took the lock ahead of the woken waiter")
	}

	// Fail-fast callers do not queue: they try once, and here they win.
	fast := acquire(t, l, key, Options{TTL: longTTL})
	if err := fast.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	// The woken waiter gives up without trying: its turn passes on.
	l.notices.leave(t.Context(), key, ws[0])
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("newcomer: %v", err)
		}
	case <-time.After(patience):
		t.Fatal("the newcomer was not woken when the woken waiter left")
	}
}

// TestWaitersShareOneSubscription shows that a Locker's waiters share one
// subscription, that they all get the lock in turn, that the subscription
// ends when the last waiter leaves, and that Close leaves no goroutine
// behind.
func TestWaitersShareOneSubscription(t *testing.T) {
	b := testBackends(t)
	if err := b.Redis.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	// The Locker has a client of its own, closed with it: on the embedded
	// Redis, which runs in this process, every connection its waiters open
	// is served by two goroutines of ours.
	rdb := redis.NewClient(&redis.Options{Addr: b.Redis.(*redis.Client).Options().Addr})
	l := NewToken(rdb)
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
		return l.notices.queueHas(key, func(q *queue) bool { return len(q.waiters) == waiters })
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
	if err := rdb.Close(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "back to the goroutines before the Locker", func() bool { return runtime.NumGoroutine() <= before })
}

// TestWaiterWakesOnRelease measures how soon a waiter holds the lock after
// a release: its own Locker's, and another process's, whose notice travels
// through Redis. It logs the delays rather than asserting them (the machine
// may be loaded); they are a fraction of a millisecond, against the tens of
// milliseconds of a poll.
func TestWaiterWakesOnRelease(t *testing.T) {
	srv := testkit.RealRedis(t)
	if srv.Kind() == testkit.RedisEmbedded {
		t.Log("miniredis runs in this process: the delays below are not Redis's")
	}
	b := Backends{Redis: srv.Client}
	for _, tc := range []struct {
		name    string
		sameOne bool // the releaser uses the waiter's Locker
	}{{"same locker", true}, {"other process", false}} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewToken(b.Redis)
			releaser := l
			if !tc.sameOne {
				releaser = NewToken(b.Redis)
				t.Cleanup(func() { releaser.Close() })
			}
			t.Cleanup(func() { l.Close() })
			key := newKey(t, b.Redis)
			const rounds = 5
			for range rounds {
				lease := acquire(t, releaser, key, Options{TTL: longTTL})
				got := make(chan time.Time, 1)
				go func() {
					defer close(got)
					lease, err := l.Acquire(t.Context(), key, Options{TTL: longTTL, Wait: patience})
					if err != nil {
						t.Error(err)
						return
					}
					at := time.Now()
					if err := lease.Release(t.Context()); err != nil {
						t.Error(err)
					}
					got <- at // after the release: the next round acquires at once
				}()
				// Released once the waiter is queued and past its first
				// attempt, so that only the release can let it in.
				eventually(t, "queued and idle", func() bool {
					return l.notices.queueHas(key, func(q *queue) bool { return len(q.waiters) == 1 && q.woken == nil })
				})
				released := time.Now()
				if err := lease.Release(t.Context()); err != nil {
					t.Fatal(err)
				}
				if at, ok := <-got; ok {
					t.Logf("holds the lock %v after the release", at.Sub(released))
				}
			}
		})
	}
}
