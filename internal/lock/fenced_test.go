package lock

import (
	"context"
	"testing"
)

// Each acquisition of a key draws a token above every earlier one, also
// after the previous holder released: the store's fence relies on it.
func TestFencedTokensGrow(t *testing.T) {
	b := testBackends(t)
	l := newLocker(t, "fenced", b)
	key := newKey(t, b.Redis)
	t.Cleanup(func() { b.Redis.Del(context.Background(), fenceKey(key)) })
	var last uint64
	for i := range 3 {
		lease, err := l.Acquire(t.Context(), key, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if tok := lease.Token(); tok <= last {
			t.Errorf("acquisition %d: token %d, want above %d", i+1, tok, last)
		} else {
			last = tok
		}
		if err := lease.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}
