package stock

import (
	"context"
	"errors"
	"testing"
)

// TestNilHooksAreFree: a purchase that asked for no trace and no fault
// calls every moment on nil hooks; none may allocate.
func TestNilHooksAreFree(t *testing.T) {
	var h *Hooks
	n := 7
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		h.acquired(1, 2, 3)
		_ = h.keepLock()
		h.sent(1)
		h.read(n)
		_ = h.inside(ctx)
		h.write(n - 1)
		h.releasing()
		h.leaseLost()
		_ = h.queueKey("k")
		_ = h.BeforeCommit(ctx, nil)
		h.done(true, nil)
		h.done(false, errors.ErrUnsupported)
		_ = Compose(h, nil)
	})
	if allocs != 0 {
		t.Errorf("nil hooks allocate %.0f times per purchase, want 0", allocs)
	}
	var tr *Trace
	if tr.Hooks() != nil || tr.Sections() != nil {
		t.Error("a nil trace has hooks or sections")
	}
}

// TestCompose: composed hooks call each part in the order given; an
// Inside error stops the parts after it; one part keeping the lock keeps
// it; the queued key passes from part to part.
func TestCompose(t *testing.T) {
	var calls []string
	stop := errors.New("stop")
	a := &Hooks{Read: func(int) { calls = append(calls, "a") }, Inside: func(context.Context) error { return stop },
		QueueKey: func(k string) string { return k + "a" }}
	b := &Hooks{Read: func(int) { calls = append(calls, "b") }, KeepLock: func() bool { return true },
		Inside:   func(context.Context) error { calls = append(calls, "b inside"); return nil },
		QueueKey: func(k string) string { return k + "b" }}
	if Compose(nil, a, nil) != a {
		t.Error("one part composed is not that part")
	}
	h := Compose(a, nil, b)
	h.read(1)
	if err := h.inside(context.Background()); !errors.Is(err, stop) {
		t.Errorf("inside: %v, want a's error", err)
	}
	if !h.keepLock() || h.queueKey("k") != "kab" {
		t.Errorf("keep %v, key %q: want true, kab", h.keepLock(), h.queueKey("k"))
	}
	if len(calls) != 2 || calls[0] != "a" || calls[1] != "b" {
		t.Errorf("calls %v, want [a b]: in order, and nothing inside after a's error", calls)
	}
}
