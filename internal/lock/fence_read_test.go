package lock

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestFencedReadRefusesAnOlderWrite is the interleaving FencedSet alone lets
// through: A (token 1) reads, its lease runs out, B (token 2) reads the same
// value, A writes first, B writes its stale result over A's. With the read
// fenced, B's read already shuts A out.
func TestFencedReadRefusesAnOlderWrite(t *testing.T) {
	b := testBackends(t)
	_, key := newFencedKeys(t, b.Redis)
	ctx := t.Context()
	if _, err := FencedGet(ctx, b.Redis, key, 1); !errors.Is(err, redis.Nil) {
		t.Fatalf("reading an absent key: %v, want redis.Nil", err)
	}
	if err := b.Redis.Set(ctx, key, "5", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := FencedGet(ctx, b.Redis, key, 1); err != nil || v != "5" {
		t.Fatalf("A reads: %q, %v", v, err)
	}
	if v, err := FencedGet(ctx, b.Redis, key, 2); err != nil || v != "5" {
		t.Fatalf("B reads: %q, %v", v, err)
	}
	if err := FencedSet(ctx, b.Redis, key, "4", 1); !errors.Is(err, ErrStaleToken) {
		t.Errorf("A writes after B read: %v, want ErrStaleToken", err)
	}
	if _, err := FencedGet(ctx, b.Redis, key, 1); !errors.Is(err, ErrStaleToken) {
		t.Errorf("A reads after B read: %v, want ErrStaleToken", err)
	}
	if err := FencedSet(ctx, b.Redis, key, "4", 2); err != nil {
		t.Errorf("B writes: %v", err)
	}
	if v, _ := b.Redis.Get(ctx, key).Result(); v != "4" {
		t.Errorf("value %q, want B's 4", v)
	}
}
