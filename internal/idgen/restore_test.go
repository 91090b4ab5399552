package idgen

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// After Redis lost the day key, Restore with the last ID issued keeps the
// next IDs of the same second from repeating it; it never moves back.
func TestRestoreAfterALostDayKey(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	now := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	g := NewRedis(rdb, "order", WithClock(func() time.Time { return now }))
	var last ID
	for range 5 {
		id, err := g.Next(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		last = id
	}
	mr.FlushAll()
	if err := g.Restore(t.Context(), last); err != nil {
		t.Fatal(err)
	}
	next, err := g.Next(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if next <= last {
		t.Errorf("after the restore: %d (seq %d), want after %d (seq %d)", next, next.Seq(), last, last.Seq())
	}
	if err := g.Restore(t.Context(), last-3); err != nil {
		t.Fatal(err)
	}
	if again, _ := g.Next(t.Context()); again != next+1 {
		t.Errorf("a restore to an earlier ID moved the sequence: %d after %d", again, next)
	}
}
