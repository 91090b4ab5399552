package lock

import (
	"context"
	_ "embed"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed reentrant_acquire.lua
	reentrantAcquireLua    string
	reentrantAcquireScript = redis.NewScript(reentrantAcquireLua)

	//go:embed reentrant_release.lua
	reentrantReleaseLua    string
	reentrantReleaseScript = redis.NewScript(reentrantReleaseLua)
)

// Reentrant is Redisson's RLock: a hash holding the owner and its hold
// count, acquired and released by Lua. The owner who holds the lock may
// acquire it again (a function that locks calling another that locks the
// same key) and must release it as many times; the last release deletes the
// lock and publishes the release. The owner is the id given to WithOwner;
// without one, every Acquire is a new owner and the lock behaves like Token.
//
// What it does not fix: the TTL is the same as Token's, so a holder paused
// past it still outlives its lease; and two requests given the same owner id
// by mistake share the lock.
//
// Round trips: one per attempt to acquire, plus a SUBSCRIBE when the caller
// is the first to wait on the key; one to release.
type Reentrant struct {
	rdb     RedisClient
	notices *notices
}

var _ Locker = (*Reentrant)(nil)

// NewReentrant returns a reentrant lock on rdb. Close it to end its
// subscription.
func NewReentrant(rdb RedisClient) *Reentrant {
	return &Reentrant{rdb: rdb, notices: newNotices(rdb)}
}

// Acquire takes a hold on key for the context's owner.
func (r *Reentrant) Acquire(ctx context.Context, key string, opt Options) (Lease, error) {
	owner, ok := ownerFrom(ctx)
	if !ok {
		owner = newToken()
	}
	ttl := opt.ttl().Milliseconds()
	keys := []string{key}
	// Boxed once, not on every attempt: the acquire script takes owner and
	// TTL, the release script those and the channel suffix.
	args := []any{owner, ttl, releasedSuffixArg}
	err := r.notices.retry(ctx, key, opt.Wait, func() (bool, error) {
		holds, err := reentrantAcquireScript.Run(ctx, r.rdb, keys, args[:2]...).Int()
		if err != nil {
			return false, fmt.Errorf("lock %s: reentrant acquire: %w", key, err)
		}
		return holds > 0, nil
	})
	if err != nil {
		return nil, err
	}
	return &reentrantLease{rdb: r.rdb, notices: r.notices, key: key, owner: owner, keys: keys, args: args}, nil
}

// Close ends the subscription that wakes waiters, and waits for its
// goroutine. Acquire still works afterwards, without the wake-ups.
func (r *Reentrant) Close() error { return r.notices.Close() }

// reentrantLease is one hold. Holds are counted in Redis, so each lease must
// give back exactly one: released, it refuses to release again rather than
// take off a hold that belongs to an enclosing lease of the same owner.
type reentrantLease struct {
	rdb        RedisClient
	notices    *notices // the Locker's, to wake its next waiter at once
	key, owner string
	keys       []string // {key}, for the release script
	args       []any    // the release script's: owner, TTL, channel suffix
	released   atomic.Bool
}

func (l *reentrantLease) Release(ctx context.Context) error {
	if l.released.Swap(true) {
		return ErrNotHeld
	}
	l.notices.releasing(l.key, l.owner)
	holds, err := reentrantReleaseScript.Run(ctx, l.rdb, l.keys, l.args...).Int()
	// The last hold frees the lock; after an error it may be free.
	l.notices.released(l.key, l.owner, err != nil || holds == 0)
	if err != nil {
		l.released.Store(false) // the hold may still be there: let the caller retry
		return fmt.Errorf("lock %s: reentrant release: %w", l.key, err)
	}
	if holds < 0 {
		return ErrNotHeld
	}
	return nil
}

func (l *reentrantLease) Token() uint64 { return 0 }
