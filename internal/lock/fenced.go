package lock

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed fenced_acquire.lua
	fencedAcquireLua    string
	fencedAcquireScript = redis.NewScript(fencedAcquireLua)
)

// Fenced is Token plus a fencing token: every acquisition also increments a
// per-key counter, in the same Lua script, and the lease carries the new
// value. A store that remembers the highest token it has seen (the stock's
// fenced read and write, internal/stock) refuses a holder that was paused
// past its lease while a newer holder wrote, which no lease, renewal or
// quorum can prevent on its own.
//
// The counter lives at key+":fence" and never expires: if it were lost,
// tokens would start again below what the stores remember and every write
// would be refused. On Redis Cluster key must carry a hash tag (like
// "seckill:lock:{42_0}") so that both keys are in one slot.
//
// Waiters wake on the release notices Token publishes (see notices).
//
// Round trips: one per attempt to acquire (lock and token together), plus a
// SUBSCRIBE when the caller is the first to wait on the key; one to release.
type Fenced struct {
	rdb     RedisClient
	notices *notices
}

var _ Locker = (*Fenced)(nil)

// NewFenced returns a fenced token lock on rdb. Close it to end its
// subscription.
func NewFenced(rdb RedisClient) *Fenced { return &Fenced{rdb: rdb, notices: newNotices(rdb)} }

// Close ends the subscription that wakes waiters, and waits for its
// goroutine. Acquire still works afterwards, without the wake-ups.
func (f *Fenced) Close() error { return f.notices.Close() }

// fenceKey is where the fencing counter of a lock key is kept. It shares
// key's hash tag.
func fenceKey(key string) string { return key + ":fence" }

// Acquire sets key to a fresh random token if the key is absent and draws
// the next fencing token.
func (f *Fenced) Acquire(ctx context.Context, key string, opt Options) (Lease, error) {
	var value any = newToken()
	keys := []string{key, fenceKey(key)}
	// Boxed once, not on every attempt.
	args := []any{value, max(opt.ttl().Milliseconds(), 1)}
	var token int64
	err := f.notices.retry(ctx, key, opt.Wait, func() (bool, error) {
		var err error
		token, err = fencedAcquireScript.Run(ctx, f.rdb, keys, args...).Int64()
		if err != nil {
			return false, fmt.Errorf("lock %s: fenced acquire: %w", key, err)
		}
		return token > 0, nil
	})
	if err != nil {
		return nil, err
	}
	return &fencedLease{tokenLease: tokenLease{rdb: f.rdb, notices: f.notices, key: key, value: value}, token: uint64(token)}, nil
}

// fencedLease is released like a token lease; it adds the token.
type fencedLease struct {
	tokenLease
	token uint64
}

func (l *fencedLease) Token() uint64 { return l.token }
