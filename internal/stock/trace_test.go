package stock

import (
	"errors"
	"testing"
)

// TestNilTraceIsFree: a purchase that asked for no trace calls every hook
// on a nil *Trace; none may allocate (a value whose address a hook takes
// would move to the heap on every call, traced or not).
func TestNilTraceIsFree(t *testing.T) {
	var tr *Trace
	n := 7
	allocs := testing.AllocsPerRun(100, func() {
		tr.acquired(1, 2, 3)
		tr.sent(1)
		tr.read(n)
		tr.write(n - 1)
		tr.releasing()
		tr.leaseLost()
		tr.Commit()
		tr.done(true, nil)
		tr.done(false, errors.ErrUnsupported)
	})
	if allocs != 0 {
		t.Errorf("a nil trace's hooks allocate %.0f times per purchase, want 0", allocs)
	}
	if tr.Sections() != nil {
		t.Error("a nil trace has sections")
	}
}
