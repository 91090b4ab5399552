package lock

import (
	"context"
	"slices"
	"sync"
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
func releasedChannel(key string) string { return key + ":released" }

// notices wakes a Locker's waiters when a lock they wait for is released,
// instead of leaving them to their backoff. One PubSub connection serves
// every waiter of the Locker: the first waiter on a key subscribes to its
// channel, the last one to leave unsubscribes, so Redis sends only the
// notices someone waits for. The notice is an optimisation, never needed
// for correctness: a waiter that misses one (it subscribed just after the
// release, or the subscription failed) still finds the lock free on its next
// backoff attempt.
type notices struct {
	rdb Subscriber

	mu      sync.Mutex
	pubsub  *redis.PubSub              // nil until the first waiter
	waiters map[string][]chan struct{} // per channel, in order of arrival
	closed  bool
	done    chan struct{} // closed when the dispatch goroutine has ended
}

func newNotices(rdb Subscriber) *notices {
	return &notices{rdb: rdb, waiters: make(map[string][]chan struct{}), done: make(chan struct{})}
}

// watch registers a waiter for key's release notices and returns the channel
// it is woken on and the func that unregisters it. After Close, or if the
// subscription cannot be made, wake is nil and the waiter only spins.
func (n *notices) watch(ctx context.Context, key string) (wake <-chan struct{}, stop func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, func() {}
	}
	if n.pubsub == nil {
		// No channels yet: the connection is made by the first Subscribe
		// below, or by the dispatch goroutine's first Receive.
		n.pubsub = n.rdb.Subscribe(ctx)
		go n.dispatch(n.pubsub.Channel())
	}
	ch := releasedChannel(key)
	if len(n.waiters[ch]) == 0 {
		if err := n.pubsub.Subscribe(ctx, ch); err != nil {
			return nil, func() {}
		}
	}
	w := make(chan struct{}, 1)
	n.waiters[ch] = append(n.waiters[ch], w)
	return w, func() { n.unwatch(ctx, ch, w) }
}

func (n *notices) unwatch(ctx context.Context, ch string, w chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.waiters[ch] = slices.DeleteFunc(n.waiters[ch], func(c chan struct{}) bool { return c == w })
	if len(n.waiters[ch]) > 0 {
		return
	}
	delete(n.waiters, ch)
	if !n.closed {
		// Best effort: a failed UNSUBSCRIBE only costs notices nobody reads.
		// The caller's context may be done already (that may be why it
		// stopped waiting), and the connection is shared, so do not let it
		// cut the command short.
		_ = n.pubsub.Unsubscribe(context.WithoutCancel(ctx), ch)
	}
}

// dispatch wakes one waiter of a channel per notice, the longest waiting
// that has not been woken yet: one release frees the lock for one holder,
// and waking every waiter would send a burst of attempts that all but one
// lose. Nothing is lost if the woken one is beaten to the lock by a waiter
// on backoff: the winner's release sends the next notice.
func (n *notices) dispatch(msgs <-chan *redis.Message) {
	defer close(n.done)
	for m := range msgs {
		n.mu.Lock()
		for _, w := range n.waiters[m.Channel] {
			if signal(w) {
				break
			}
		}
		n.mu.Unlock()
	}
}

// signal wakes w unless a wake-up is already pending there (it was woken
// and has not come back to waiting yet), and says whether it did.
func signal(w chan struct{}) bool {
	select {
	case w <- struct{}{}:
		return true
	default:
		return false
	}
}

// retry is the package's retry with release notices: one attempt, then, if
// the caller waits, a subscription to key's notices and more attempts, each
// on a notice or at the end of a backoff.
func (n *notices) retry(ctx context.Context, key string, wait time.Duration, try func() (bool, error)) error {
	start := time.Now()
	if ok, err := try(); err != nil || ok {
		return err
	}
	if wait <= 0 {
		return ErrNotObtained
	}
	wake, stop := n.watch(ctx, key)
	defer stop()
	// retry's first attempt comes right after the subscription, so a release
	// between the attempt above and the SUBSCRIBE is not waited for.
	return retry(ctx, wait-time.Since(start), wake, try)
}

// Close ends the subscription and waits for its goroutine. Waiters still
// waiting fall back to spinning. Close is idempotent.
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
