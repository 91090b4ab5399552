package lock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// newFencedKeys returns a lock key and a data key of their own, both
// hash-tagged, and deletes them and their fences when the test ends.
func newFencedKeys(t *testing.T, rdb *redis.Client) (lockKey, dataKey string) {
	t.Helper()
	lockKey, dataKey = newKey(t, rdb), newKey(t, rdb)
	t.Cleanup(func() {
		// t.Context() is already done during cleanup.
		if err := rdb.Del(context.Background(), fenceKey(lockKey), fenceKey(dataKey)).Err(); err != nil {
			t.Errorf("deleting fences: %v", err)
		}
	})
	return lockKey, dataKey
}

// waitGone polls until key no longer exists: a lease has run out.
func waitGone(t *testing.T, rdb *redis.Client, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := rdb.Exists(ctx, key).Result()
		if err != nil {
			t.Fatalf("waiting for %s to expire: %v", key, err)
		}
		if n == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not expire: %v", key, ctx.Err())
		case <-tick.C:
		}
	}
}

// TestFencedStaleHolder is the pause that a lease cannot prevent: A holds
// the lock without renewal and stalls past its TTL; B takes the lock with a
// newer token and writes; A wakes and writes too. The store refuses A.
func TestFencedStaleHolder(t *testing.T) {
	b := testBackends(t)
	l := newLocker(t, "fenced", b)
	lockKey, dataKey := newFencedKeys(t, b.Redis)
	ctx := t.Context()

	a, err := l.Acquire(ctx, lockKey, Options{TTL: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("A acquire: %v", err)
	}
	waitGone(t, b.Redis, lockKey) // A's pause, longer than its lease

	bl, err := l.Acquire(ctx, lockKey, Options{})
	if err != nil {
		t.Fatalf("B acquire after A's lease ran out: %v", err)
	}
	if a.Token() == 0 || bl.Token() <= a.Token() {
		t.Fatalf("tokens A %d, B %d: want 0 < A < B", a.Token(), bl.Token())
	}
	if err := FencedSet(ctx, b.Redis, dataKey, "B", bl.Token()); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if err := FencedSet(ctx, b.Redis, dataKey, "A", a.Token()); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("A's late write: got %v, want ErrStaleToken", err)
	}
	if got, err := b.Redis.Get(ctx, dataKey).Result(); err != nil || got != "B" {
		t.Fatalf("value after A's late write: %q, %v; want B's", got, err)
	}
	if err := a.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Errorf("A's release after its lease ran out: got %v, want ErrNotHeld", err)
	}
	if err := bl.Release(ctx); err != nil {
		t.Errorf("B's release: %v", err)
	}
}

// TestFencedSet checks the write side alone: a token at least the highest
// seen writes, an older one does not.
func TestFencedSet(t *testing.T) {
	b := testBackends(t)
	_, key := newFencedKeys(t, b.Redis)
	ctx := t.Context()
	steps := []struct {
		value   string
		token   uint64
		wantErr error
		want    string // the value afterwards
	}{
		{"first", 5, nil, "first"},
		{"same holder again", 5, nil, "same holder again"},
		{"newer", 7, nil, "newer"},
		{"stale", 6, ErrStaleToken, "newer"},
		{"ancient", 1, ErrStaleToken, "newer"},
	}
	for _, s := range steps {
		if err := FencedSet(ctx, b.Redis, key, s.value, s.token); !errors.Is(err, s.wantErr) {
			t.Errorf("FencedSet(%q, %d): got %v, want %v", s.value, s.token, err, s.wantErr)
		}
		if got, _ := b.Redis.Get(ctx, key).Result(); got != s.want {
			t.Errorf("after FencedSet(%q, %d): value %q, want %q", s.value, s.token, got, s.want)
		}
	}
}
