package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultNodeTimeout bounds one round of requests to the Redlock nodes when
// Redlock.NodeTimeout is zero. The Redlock description asks for a timeout
// much smaller than the lease (5–50ms for a 10s lease) so that a dead node
// costs little of it.
const DefaultNodeTimeout = 50 * time.Millisecond

// Redlock is the Redlock algorithm over N independent Redis servers: SET NX
// PX with one random value on every node at once, and the lock is held when a
// majority said yes while the lease still has time left after subtracting
// the time that took and an allowance for clock drift. It survives the loss
// of a minority of nodes, which a single-node lock cannot.
//
// What it cannot fix: like Token, a holder paused past its validity still
// believes it holds the lock; and its safety assumes bounded clock drift and
// no node restarting empty while a lease it granted is live (Kleppmann, "How
// to do distributed locking", 2016). Fencing (see Fenced) addresses the first.
//
// Round trips: one per attempt to every node in parallel, plus one more to
// undo a failed attempt; one to every node to release.
type Redlock struct {
	nodes  []RedisClient
	quorum int
	// NodeTimeout bounds each round of requests to the nodes (set it before
	// the first Acquire). Default: DefaultNodeTimeout.
	NodeTimeout time.Duration
}

var _ Locker = (*Redlock)(nil)

// NewRedlock returns a Redlock over nodes, which must be independent servers
// (not replicas of each other: a replica lags, so a lock can vanish in a
// failover). It refuses with ErrUnsupported when there are none.
func NewRedlock(nodes ...RedisClient) (*Redlock, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: redlock needs independent Redis nodes (set REDIS_ADDRS, e.g. five addresses)", ErrUnsupported)
	}
	return &Redlock{nodes: nodes, quorum: len(nodes)/2 + 1}, nil
}

func newRedlockBackends(b Backends) (Locker, error) {
	nodes := make([]RedisClient, len(b.Nodes))
	for i, n := range b.Nodes {
		nodes[i] = n
	}
	r, err := NewRedlock(nodes...)
	if err != nil {
		return nil, err // not r: a nil *Redlock in a Locker is not a nil Locker
	}
	return r, nil
}

// nodeReply is what one node answered in the last round.
type nodeReply struct {
	// err: no answer, so the SET may or may not have landed there.
	err error
	// ok: SET NX answered OK (or, after a release, the value was deleted).
	ok bool
}

// taken reports that the node answered that another owner holds the key,
// so this owner's value cannot be there and there is nothing to undo.
func (r nodeReply) taken() bool { return r.err == nil && !r.ok }

// Acquire sets key to one fresh random value on a majority of the nodes.
// A round in which too few nodes answered for anyone to win is retried like
// a lost one (a node may only be slow); if the last round was such a round,
// Acquire returns that outage, naming the silent nodes, not ErrNotObtained.
func (r *Redlock) Acquire(ctx context.Context, key string, opt Options) (Lease, error) {
	l := &RedlockLease{r: r, key: key, keys: []string{key}, value: newToken(), replies: make([]nodeReply, len(r.nodes))}
	ttl := opt.ttl()
	var outage error
	err := retry(ctx, opt.Wait, func() (bool, error) {
		var ok bool
		ok, outage = r.attempt(ctx, l, ttl)
		return ok, nil
	})
	if errors.Is(err, ErrNotObtained) && outage != nil {
		err = outage
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}

// attempt is one round of the algorithm. It reports whether it obtained
// the lock and, if not, whether too few nodes answered for anyone to win.
func (r *Redlock) attempt(ctx context.Context, l *RedlockLease, ttl time.Duration) (ok bool, outage error) {
	drift := ttl/100 + 2*time.Millisecond
	start := time.Now()
	r.each(ctx, nil, func(ctx context.Context, i int) {
		ok, err := r.nodes[i].SetNX(ctx, l.key, l.value, ttl).Result()
		l.replies[i] = nodeReply{err: err, ok: ok}
	})
	// Each node's copy expires no earlier than start+ttl by its own clock;
	// the drift allowance covers clocks that run at slightly different rates.
	validity := ttl - time.Since(start) - drift
	locked, silent := 0, 0
	for _, rep := range l.replies {
		switch {
		case rep.ok:
			locked++
		case rep.err != nil:
			silent++
		}
	}
	if locked >= r.quorum && validity > 0 {
		l.validity, l.until = validity, start.Add(ttl-drift)
		return true, nil
	}
	// Undo this round so that the nodes we did get are free for the next
	// contender at once instead of after ttl. Its errors change nothing:
	// what it misses expires.
	r.unlock(ctx, l)
	if len(r.nodes)-silent < r.quorum {
		errs := make([]error, 0, silent)
		for i, rep := range l.replies {
			if rep.err != nil {
				errs = append(errs, fmt.Errorf("node %d: %w", i, rep.err))
			}
		}
		return false, fmt.Errorf("lock %s: redlock: %d of %d nodes did not answer, a majority is %d: %w",
			l.key, silent, len(r.nodes), r.quorum, errors.Join(errs...))
	}
	return false, nil
}

// unlock deletes l's value, by compare-and-delete, on every node where it
// may be: all nodes except those that answered that someone else holds the
// key. (The Redlock description says to try every node; a node that said
// "taken" is the one case where SET NX certainly did not store our value.)
// It leaves in l.replies whether each node deleted it.
func (r *Redlock) unlock(ctx context.Context, l *RedlockLease) {
	r.each(ctx, func(i int) bool { return !l.replies[i].taken() }, func(ctx context.Context, i int) {
		n, err := releaseScript.Run(ctx, r.nodes[i], l.keys, l.value).Int()
		l.replies[i] = nodeReply{err: err, ok: n == 1}
	})
}

// each calls fn(i) for every node i that want accepts (all when want is
// nil), in parallel, under one NodeTimeout, and returns when every call has
// returned. The caller's goroutine takes the first node itself.
func (r *Redlock) each(ctx context.Context, want func(int) bool, fn func(context.Context, int)) {
	timeout := r.NodeTimeout
	if timeout <= 0 {
		timeout = DefaultNodeTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var wg sync.WaitGroup
	mine := -1
	for i := range r.nodes {
		switch {
		case want != nil && !want(i):
		case mine < 0:
			mine = i
		default:
			wg.Go(func() { fn(ctx, i) })
		}
	}
	if mine >= 0 {
		fn(ctx, mine)
	}
	wg.Wait()
}

// RedlockLease is a lock held on a majority of the Redlock nodes.
type RedlockLease struct {
	r        *Redlock
	key      string
	keys     []string // {key}, for the release script
	value    any      // the owner's random string, boxed once, not per node per round
	replies  []nodeReply
	validity time.Duration
	until    time.Time
	released atomic.Bool
}

var _ Lease = (*RedlockLease)(nil)

// Validity is how long the lock was certainly held when Acquire returned:
// the TTL minus the time acquisition took minus the drift allowance.
func (l *RedlockLease) Validity() time.Duration { return l.validity }

// Until is when the lock stops being certainly held (by the local clock).
func (l *RedlockLease) Until() time.Time { return l.until }

// Release deletes the value on every node that may hold it. It returns
// ErrNotHeld when fewer than a majority still held this owner's value, so
// that the lock may have been someone else's in the meantime.
func (l *RedlockLease) Release(ctx context.Context) error {
	if !l.released.CompareAndSwap(false, true) {
		return ErrNotHeld
	}
	l.r.unlock(ctx, l)
	deleted := 0
	var errs []error
	for i, rep := range l.replies {
		switch {
		case rep.ok:
			deleted++
		case rep.err != nil:
			errs = append(errs, fmt.Errorf("node %d: %w", i, rep.err))
		}
	}
	switch {
	case deleted >= l.r.quorum:
		return nil
	case errs != nil:
		return fmt.Errorf("lock %s: redlock release: %w", l.key, errors.Join(errs...))
	}
	return ErrNotHeld
}

// Token is 0: Redlock issues no fencing token (there is no single counter
// that a majority of independent nodes agree on).
func (l *RedlockLease) Token() uint64 { return 0 }
