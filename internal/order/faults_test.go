package order

import (
	"context"
	"testing"
	"time"

	"seckill/internal/lock"
	"seckill/internal/stock"
)

// TestFaultsHooks: a purchase without lab options, or with options that
// have no moment in a take, gives the take no hooks; each fault hooks its
// own moment, and release_before_commit moves the hold from inside the
// critical section to before the COMMIT, which it releases the lock for.
func TestFaultsHooks(t *testing.T) {
	for _, lab := range []LabOptions{{}, {Lock: "none", Mode: "rmw"}, {Faults: Faults{CrashAfterTake: true, Lock: lock.Fault{ClockSkew: time.Second}}}} {
		if h := lab.hooks(); h != nil {
			t.Errorf("%+v: hooks %+v, want none", lab, h)
		}
	}
	hold := LabOptions{Faults: Faults{Hold: time.Millisecond, Abandon: true, Poison: true}}.hooks()
	if hold.Inside == nil || hold.Committing != nil || !hold.KeepLock() || hold.QueueKey("k") != poisonKey {
		t.Errorf("hold, abandon, poison: %+v, want a pause inside, the lock kept, the poison key", hold)
	}
	rbc := LabOptions{Faults: Faults{Hold: time.Millisecond, ReleaseBeforeCommit: true}, Trace: stock.NewTrace()}.hooks()
	released := false
	if err := rbc.BeforeCommit(context.Background(), func() { released = true }); err != nil || !released {
		t.Errorf("release_before_commit: %v, released %v: want the lock released before the COMMIT", err, released)
	}
	if (Faults{Hold: time.Millisecond, ReleaseBeforeCommit: true}).Hooks().Inside != nil {
		t.Error("release_before_commit also holds inside the critical section, want only before the COMMIT")
	}
}
