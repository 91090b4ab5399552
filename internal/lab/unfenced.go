package lab

import (
	"context"

	"seckill/internal/lock"
)

// Unfenced hides a locker's fencing token: the etcd lock without its
// fence, the lesson of the etcd drills (loadtest's) and the lock's tests.
type Unfenced struct{ lock.Locker }

type unfencedLease struct{ lock.Lease }

func (u Unfenced) Acquire(ctx context.Context, key string, opt lock.Options) (lock.Lease, error) {
	l, err := u.Locker.Acquire(ctx, key, opt)
	if err != nil {
		return nil, err
	}
	return unfencedLease{l}, nil
}

func (unfencedLease) Token() uint64           { return 0 }
func (u unfencedLease) Lost() <-chan struct{} { return lock.Lost(u.Lease) }
func (u unfencedLease) Abandon()              { lock.Abandon(u.Lease) }
