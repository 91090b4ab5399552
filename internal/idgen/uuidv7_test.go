package idgen_test

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"seckill/internal/idgen"
)

// TestUUIDv7Unique has 8 goroutines, released at once, take 80,000 UUIDs.
func TestUUIDv7Unique(t *testing.T) {
	var g idgen.UUIDv7
	ctx := t.Context()
	got := releaseAtOnce(t, 8, 10_000, func(int) (string, error) { return g.NextString(ctx) })
	checkUniqueAndIncreasing(t, got)
}

// TestUUIDv7TimeOrdered checks that UUIDs sort as text in the order they
// were made and carry the time they were made at.
func TestUUIDv7TimeOrdered(t *testing.T) {
	var g idgen.UUIDv7
	before := time.Now().Truncate(time.Millisecond)
	var prev string
	for i := range 10_000 {
		s, err := g.NextString(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if s <= prev {
			t.Fatalf("uuid %d: %s followed %s", i, s, prev)
		}
		prev = s
	}
	after := time.Now()
	u, err := uuid.Parse(prev)
	if err != nil {
		t.Fatal(err)
	}
	if u.Version() != 7 {
		t.Errorf("%s is version %d", u, u.Version())
	}
	sec, nsec := u.Time().UnixTime()
	// The time was taken between before and after, give or take the
	// sub-millisecond counter running ahead of the clock.
	if made := time.Unix(sec, nsec); made.Before(before) || made.After(after.Add(time.Second)) {
		t.Errorf("%s carries %v, made between %v and %v", u, made, before, after)
	}
}
