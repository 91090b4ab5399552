package lock

import (
	"context"
	"crypto/rand"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed release.lua
var releaseLua string

var releaseScript = redis.NewScript(releaseLua)

// RedisClient is what the single-node Redis strategies need of a client.
type RedisClient interface {
	redis.Scripter
	Subscriber
	SetNX(ctx context.Context, key string, value any, expiration time.Duration) *redis.BoolCmd
}

var _ RedisClient = (*redis.Client)(nil)

// Token is SET key <random token> NX PX ttl, released by a Lua
// compare-and-delete that also publishes the release. Only the owner can
// release, and a crashed owner's lock expires. What it cannot fix: a holder
// paused past its TTL still believes it holds the lock while the next holder
// works (see Watchdog and Fenced). It is not reentrant: a holder that
// acquires the same key again waits for itself.
//
// Round trips: one per attempt to acquire, plus a SUBSCRIBE when the caller
// is the first to wait on the key; one to release.
type Token struct {
	rdb     RedisClient
	notices *notices
}

var _ Locker = (*Token)(nil)

// NewToken returns a token lock on rdb. Close it to end its subscription.
func NewToken(rdb RedisClient) *Token { return &Token{rdb: rdb, notices: newNotices(rdb)} }

// Acquire sets key to a fresh random token if the key is absent.
func (t *Token) Acquire(ctx context.Context, key string, opt Options) (Lease, error) {
	l, err := t.acquire(ctx, key, opt)
	if err != nil {
		return nil, err
	}
	return &l, nil
}

func (t *Token) acquire(ctx context.Context, key string, opt Options) (tokenLease, error) {
	var value any = newToken() // boxed once, not per attempt and release
	ttl := opt.ttl()
	err := t.notices.retry(ctx, key, opt.Wait, func() (bool, error) {
		ok, err := t.rdb.SetNX(ctx, key, value, ttl).Result()
		if err != nil {
			return false, fmt.Errorf("lock %s: SET NX PX: %w", key, err)
		}
		return ok, nil
	})
	if err != nil {
		return tokenLease{}, err
	}
	return tokenLease{rdb: t.rdb, notices: t.notices, key: key, value: value}, nil
}

// newToken returns a random owner value: 128 bits from crypto/rand, as
// base32 text (rand.Text), which costs one allocation where a UUID string
// costs two.
func newToken() string { return rand.Text() }

// Close ends the subscription that wakes waiters, and waits for its
// goroutine. Acquire still works afterwards, without the wake-ups.
func (t *Token) Close() error { return t.notices.Close() }

type tokenLease struct {
	rdb     RedisClient
	notices *notices // the Locker's, to wake its next waiter at once
	key     string
	value   any // the owner's random string, boxed once
}

func (l *tokenLease) Release(ctx context.Context) error {
	payload := l.value.(string)
	l.notices.releasing(l.key, payload)
	n, err := releaseScript.Run(ctx, l.rdb, []string{l.key}, l.value, releasedSuffixArg).Int()
	// After an error the lock may be free: a waiter woken for nothing
	// costs one attempt, one left asleep a poll.
	l.notices.released(l.key, payload, err != nil || n == 1)
	if err != nil {
		return fmt.Errorf("lock %s: release: %w", l.key, err)
	}
	if n == 0 {
		return ErrNotHeld
	}
	return nil
}

func (l *tokenLease) Token() uint64 { return 0 }
