package lock_test

import (
	"log/slog"
	"testing"
	"time"

	"seckill/internal/lock"
)

// Try takes a free key, leaves a held one to its holder (nil, no error),
// and its release frees the key for the next.
func TestTryLeavesAHeldKeyToItsHolder(t *testing.T) {
	l, log := lock.NewLocal(), slog.New(slog.DiscardHandler)
	release, err := lock.Try(t.Context(), l, "job", time.Minute, time.Second, log)
	if err != nil || release == nil {
		t.Fatalf("Try on a free key: release %v, %v; want it taken", release != nil, err)
	}
	if again, err := lock.Try(t.Context(), l, "job", time.Minute, time.Second, log); err != nil || again != nil {
		t.Fatalf("Try on a held key: release %v, %v; want nil, nil", again != nil, err)
	}
	release()
	next, err := lock.Try(t.Context(), l, "job", time.Minute, time.Second, log)
	if err != nil || next == nil {
		t.Fatalf("Try after the release: release %v, %v; want it taken", next != nil, err)
	}
	next()
}
