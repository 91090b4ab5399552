package lock

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Subscriber opens pub/sub subscriptions; *redis.Client and
// *redis.ClusterClient are Subscribers.
type Subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// releasedChannel is where a release script announces that key is free. It
// lives beside the key, so MONITOR and PUBSUB CHANNELS read naturally.
func releasedChannel(key string) string { return key + releasedSuffix }

// keyOf is the key whose releases channel announces.
func keyOf(channel string) string { return strings.TrimSuffix(channel, releasedSuffix) }

const releasedSuffix = ":released"

// releasedSuffixArg is releasedSuffix boxed once, for the release scripts,
// which append it to the key.
var releasedSuffixArg any = releasedSuffix

// notices wakes a Locker's waiters when a lock they wait for is released,
// instead of leaving them to their backoff. One PubSub connection serves
// every waiter of the Locker: the first waiter on a key subscribes to its
// channel, the last one to leave unsubscribes, so Redis sends only the
// notices someone waits for.
//
// A key's waiters form a queue in order of arrival, and a release wakes one
// of them, the longest waiting, to try: one release frees the lock for one
// holder, and waking every waiter would send a burst of attempts that all
// but one lose. For the same reason only one waiter per key is woken at a
// time (a notice that comes while it tries is kept for when it has tried),
// and an Acquire that arrives while a woken waiter is on its way to the lock
// queues behind it instead of trying first: a woken waiter that lost to a
// newcomer would have spent a round trip for nothing and gone back to wait.
// So a process's goroutines take a contended key in turn, and each release
// costs one attempt, the one that wins. The price is a goroutine wake-up on
// each change of hands, which letting the newcomer go first (as sync.Mutex
// does) would save; but here losing costs the woken waiter a round trip to
// Redis, not a spin, and in the service the releaser has gone back to its
// request, so the waiter woken for the release is the one to serve.
//
// A release by this Locker wakes its next waiter as it is sent, without
// waiting for its reply or for its own notice to come back from Redis (see
// releasing); the notice then only tells the other processes. Releases by
// other processes arrive as notices.
//
// The notice is the primary wake-up but never needed for correctness: a
// waiter also polls, on a long jittered backoff, for the frees that send
// none (a lease that expired, notices lost while the connection was down).
// The race of subscribing is closed by the subscription itself: when Redis
// confirms a SUBSCRIBE (also after a reconnect), the key's longest waiter is
// woken to try, so a release between a waiter's first attempt and its
// subscription is not waited for.
type notices struct {
	rdb Subscriber

	mu     sync.Mutex
	pubsub *redis.PubSub     // nil until the first waiter
	queues map[string]*queue // per lock key; absent when nobody waits
	closed bool
	done   chan struct{} // closed when the dispatch goroutine has ended

	// waited counts the queues, and trying those with a woken waiter, so
	// that Acquire and Release skip the mutex when nobody waits: the
	// uncontended path.
	waited, trying atomic.Int32
}

// queue is the waiters of one key.
type queue struct {
	waiters []*waiter // in order of arrival
	// woken is the waiter woken to try, until its attempt has ended; nil
	// when nobody is on the way to the lock.
	woken *waiter
	// missed: a release came while woken was trying. If that attempt
	// fails, the release may have come after it, so the next waiter is
	// woken at once.
	missed bool
	// echoes are the payloads of this Locker's own releases whose notices
	// have not come back yet: their waiter was woken already.
	echoes []string
}

// maxEchoes bounds queue.echoes: a notice that never comes back (published
// before the subscription was active) would otherwise stay for as long as
// the key has waiters.
const maxEchoes = 8

// waiter is one Acquire waiting on a key. Waiters are pooled: an Acquire
// that waits would otherwise allocate the channel and the timer each time.
type waiter struct {
	wake  chan struct{} // buffered (1): try now
	timer *time.Timer   // its backoff
}

var waiterPool = sync.Pool{New: func() any {
	return &waiter{wake: make(chan struct{}, 1), timer: newStoppedTimer()}
}}

func newNotices(rdb Subscriber) *notices {
	return &notices{rdb: rdb, queues: make(map[string]*queue), done: make(chan struct{})}
}

// yields says whether an Acquire on key should queue behind a woken waiter
// rather than try first.
func (n *notices) yields(key string) bool {
	if n.trying.Load() == 0 {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	q := n.queues[key]
	return q != nil && q.woken != nil
}

// join queues a waiter on key, subscribing to its release notices if it is
// the first. After Close, or if the subscription cannot be made, it returns
// nil and the caller only spins.
func (n *notices) join(ctx context.Context, key string) *waiter {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	if n.pubsub == nil {
		// No channels yet: the connection is made by the first Subscribe
		// below, or by the dispatch goroutine's first Receive.
		n.pubsub = n.rdb.Subscribe(ctx)
		go n.dispatch(n.pubsub.ChannelWithSubscriptions())
	}
	q := n.queues[key]
	if q == nil {
		// Its confirmation wakes this waiter (see dispatch).
		if err := n.pubsub.Subscribe(ctx, releasedChannel(key)); err != nil {
			return nil
		}
		q = &queue{}
		n.queues[key] = q
		n.waited.Add(1)
	}
	w := waiterPool.Get().(*waiter)
	q.waiters = append(q.waiters, w)
	return w
}

// leave takes w off key's queue, passing on a wake-up it did not use, and
// unsubscribes when nobody waits any more. w must not be used afterwards.
func (n *notices) leave(ctx context.Context, key string, w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	defer recycle(w)
	q := n.queues[key]
	q.waiters = slices.DeleteFunc(q.waiters, func(x *waiter) bool { return x == w })
	if q.woken == w {
		// It was woken and left before its attempt ended (its context
		// ended, or the attempt failed): the release it was woken for must
		// not go unanswered.
		n.setWoken(q, nil)
		q.missed = false
		n.wakeNext(q)
	}
	if len(q.waiters) > 0 {
		return
	}
	delete(n.queues, key)
	n.waited.Add(-1)
	if !n.closed {
		// Best effort: a failed UNSUBSCRIBE only costs notices nobody reads.
		// The caller's context may be done already (that may be why it
		// stopped waiting), and the connection is shared, so do not let it
		// cut the command short.
		_ = n.pubsub.Unsubscribe(context.WithoutCancel(ctx), releasedChannel(key))
	}
}

// recycle returns w to the pool, without a wake-up or a running timer.
// n.mu must be held: no wake-up can be sent to w after it has left.
func recycle(w *waiter) {
	select {
	case <-w.wake:
	default:
	}
	w.timer.Stop()
	waiterPool.Put(w)
}

// tried ends w's attempt. A woken waiter that failed is woken again at once
// if a release came while it tried; it keeps its place at the head.
func (n *notices) tried(key string, w *waiter, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	select {
	case <-w.wake: // it tried on its backoff before reading the wake-up
	default:
	}
	q := n.queues[key]
	if q.woken != w {
		return
	}
	n.setWoken(q, nil)
	missed := q.missed
	q.missed = false
	if !ok && missed {
		n.wakeNext(q)
	}
}

// releasing is called before this Locker sends a release of key that
// publishes payload, and released after, with whether the lock is now free.
//
// The next waiter is woken before the release is sent, not when its reply
// comes: its attempt then reaches Redis right behind the release, and the
// lock changes hands in about one round trip instead of two. If the attempt
// overtakes the release and fails, released wakes the waiter again (see
// wakeNext: the release counts as missed while it tries). The notice, which
// may come back before the reply, wakes nobody.
func (n *notices) releasing(key, payload string) {
	n.onQueue(key, func(q *queue) {
		if len(q.echoes) == maxEchoes {
			q.echoes = slices.Delete(q.echoes, 0, 1)
		}
		q.echoes = append(q.echoes, payload)
		n.wakeNext(q)
	})
}

func (n *notices) released(key, payload string, free bool) {
	n.onQueue(key, func(q *queue) {
		if free {
			n.wakeNext(q)
		} else if i := slices.Index(q.echoes, payload); i >= 0 {
			q.echoes = slices.Delete(q.echoes, i, i+1) // nothing was published
		}
	})
}

// onQueue calls f with key's queue, under the mutex, if anyone waits on key.
func (n *notices) onQueue(key string, f func(*queue)) {
	if n == nil || n.waited.Load() == 0 {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if q := n.queues[key]; q != nil {
		f(q)
	}
}

// wakeNext wakes q's longest waiter, unless a woken waiter is still trying:
// then the release is noted for when it has tried. n.mu must be held.
func (n *notices) wakeNext(q *queue) {
	if q.woken != nil {
		q.missed = true
		return
	}
	if len(q.waiters) == 0 {
		return
	}
	w := q.waiters[0]
	n.setWoken(q, w)
	select {
	case w.wake <- struct{}{}:
	default: // cannot happen: tried and leave drain it
	}
}

// setWoken sets q.woken and keeps n.trying in step. n.mu must be held.
func (n *notices) setWoken(q *queue, w *waiter) {
	switch {
	case q.woken == nil && w != nil:
		n.trying.Add(1)
	case q.woken != nil && w == nil:
		n.trying.Add(-1)
	}
	q.woken = w
}

// dispatch turns what the subscription receives into wake-ups: a release
// notice, unless it is the echo of this Locker's own release, and the
// confirmation of a SUBSCRIBE.
func (n *notices) dispatch(msgs <-chan any) {
	defer close(n.done)
	for m := range msgs {
		n.mu.Lock()
		switch m := m.(type) {
		case *redis.Message:
			if q := n.queues[keyOf(m.Channel)]; q != nil {
				if i := slices.Index(q.echoes, m.Payload); i >= 0 {
					// Older echoes that never came are dropped with it.
					q.echoes = slices.Delete(q.echoes, 0, i+1)
				} else {
					n.wakeNext(q)
				}
			}
		case *redis.Subscription:
			if q := n.queues[keyOf(m.Channel)]; q != nil && m.Kind == "subscribe" {
				n.wakeNext(q)
			}
		}
		n.mu.Unlock()
	}
}

// Backoff of the polling of a waiter without notices (the package's retry),
// doubling from minBackoff to maxBackoff, and of a waiter with notices,
// which polls only for the frees that send none, so always at maxBackoff.
const (
	minBackoff = time.Millisecond
	maxBackoff = 64 * time.Millisecond
)

// retry is the package's retry with release notices: one attempt (unless
// a woken waiter is about to try: see notices), then, if the caller waits,
// a place in the key's queue and an attempt on each wake-up or at the end
// of each backoff.
func (n *notices) retry(ctx context.Context, key string, wait time.Duration, try func() (bool, error)) error {
	deadline := time.Now().Add(wait)
	if wait <= 0 || !n.yields(key) {
		if ok, err := try(); err != nil || ok {
			return err
		}
		if wait <= 0 {
			return ErrNotObtained
		}
	}
	w := n.join(ctx, key)
	if w == nil {
		return retry(ctx, time.Until(deadline), try)
	}
	defer n.leave(ctx, key, w)
	return spin(ctx, deadline, maxBackoff, w.wake, w.timer, func() (bool, error) {
		ok, err := try()
		n.tried(key, w, ok)
		return ok, err
	})
}

// Close ends the subscription and waits for its goroutine. Waiters still
// waiting fall back to polling. Close is idempotent.
func (n *notices) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	ps := n.pubsub
	n.mu.Unlock()
	if ps == nil {
		return nil
	}
	err := ps.Close()
	<-n.done
	return err
}
