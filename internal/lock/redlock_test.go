package lock

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"seckill/internal/testkit"
)

func newTestRedlock(t *testing.T, nodes []*testkit.RedisServer) *Redlock {
	t.Helper()
	l, err := New("redlock", Backends{Nodes: testkit.RedisClients(nodes)})
	if err != nil {
		t.Fatalf("New(redlock): %v", err)
	}
	return l.(*Redlock)
}

func TestRedlockRefusedWithoutNodes(t *testing.T) {
	_, err := New("redlock", Backends{})
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("New(redlock) without nodes: got %v, want ErrUnsupported", err)
	}
}

// TestRedlockQuorum stops nodes one by one: the lock is obtained while a
// majority (3 of 5) is up, refused as an outage when it is not, and obtained
// again once a node comes back.
func TestRedlockQuorum(t *testing.T) {
	nodes := testkit.RedisNodes(t, 5)
	r := newTestRedlock(t, nodes)
	key := "test:redlock:{" + uuid.NewString() + "}"
	ctx := t.Context()

	acquireRelease := func() error {
		l, err := r.Acquire(ctx, key, Options{TTL: 5 * time.Second})
		if err != nil {
			return err
		}
		if v := l.(*RedlockLease).Validity(); v <= 0 {
			t.Errorf("validity %v, want > 0", v)
		}
		return l.Release(ctx)
	}

	nodes[0].Stop(t)
	nodes[1].Stop(t)
	if err := acquireRelease(); err != nil {
		t.Fatalf("with 3 of 5 nodes up: %v", err)
	}

	nodes[2].Stop(t)
	err := acquireRelease()
	if err == nil || errors.Is(err, ErrNotObtained) {
		t.Fatalf("with 2 of 5 nodes up: got %v, want an outage error", err)
	}
	t.Logf("with 2 of 5 nodes up: %v", err)
	// Waiting retries, but an outage is still reported as one at the end.
	if _, err := r.Acquire(ctx, key, Options{Wait: 100 * time.Millisecond}); err == nil || errors.Is(err, ErrNotObtained) {
		t.Fatalf("with 2 of 5 nodes up, waiting: got %v, want an outage error", err)
	}

	nodes[0].Restart(t)
	if err := acquireRelease(); err != nil {
		t.Fatalf("with 3 of 5 nodes up again: %v", err)
	}
}

// TestRedlockContended: a held lock is refused to a second owner, then
// obtained by it once released; a second release is refused.
func TestRedlockContended(t *testing.T) {
	r := newTestRedlock(t, testkit.RedisNodes(t, 3))
	key := "test:redlock:{" + uuid.NewString() + "}"
	ctx := t.Context()

	a, err := r.Acquire(ctx, key, Options{})
	if err != nil {
		t.Fatalf("A: %v", err)
	}
	if _, err := r.Acquire(ctx, key, Options{}); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("B while A holds: got %v, want ErrNotObtained", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("A release: %v", err)
	}
	if err := a.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("A second release: got %v, want ErrNotHeld", err)
	}
	b, err := r.Acquire(ctx, key, Options{})
	if err != nil {
		t.Fatalf("B after A released: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatalf("B release: %v", err)
	}
}

// slowNode answers SET NX only after a delay, as a distant or busy node
// would.
type slowNode struct {
	RedisClient
	delay time.Duration
}

func (s slowNode) SetNX(ctx context.Context, key string, value any, ttl time.Duration) *redis.BoolCmd {
	timer := time.NewTimer(s.delay)
	defer timer.Stop()
	select {
	case <-timer.C:
		return s.RedisClient.SetNX(ctx, key, value, ttl)
	case <-ctx.Done():
		cmd := redis.NewBoolCmd(ctx)
		cmd.SetErr(ctx.Err())
		return cmd
	}
}

// TestRedlockValidity: the validity a lease reports is the TTL minus at
// least the time acquisition took, here at least one slow node's delay.
func TestRedlockValidity(t *testing.T) {
	nodes := testkit.RedisNodes(t, 5)
	const delay = 200 * time.Millisecond
	clients := make([]RedisClient, len(nodes))
	for i, n := range nodes {
		clients[i] = n.Client
	}
	clients[0] = slowNode{RedisClient: nodes[0].Client, delay: delay}
	r, err := NewRedlock(clients...)
	if err != nil {
		t.Fatal(err)
	}
	r.NodeTimeout = 10 * delay // wait for the slow node, so its delay is part of acquisition

	const ttl = 5 * time.Second
	l, err := r.Acquire(t.Context(), "test:redlock:{"+uuid.NewString()+"}", Options{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	v := l.(*RedlockLease).Validity()
	if v <= 0 || ttl-v < delay {
		t.Errorf("validity %v with TTL %v and a node %v slow: want in (0, %v]", v, ttl, delay, ttl-delay)
	}
	t.Logf("TTL %v, one node %v slow: validity %v", ttl, delay, v)
}

// TestRedlockExclusion releases many goroutines at once on one key; each
// acquires and releases several times and records how many holders were
// inside at once.
func TestRedlockExclusion(t *testing.T) {
	r := newTestRedlock(t, testkit.RedisNodes(t, 5))
	// Under -race on a shared CPU a healthy node can take longer than the
	// default; this test is about exclusion, not timeouts.
	r.NodeTimeout = time.Second
	key := "test:redlock:{" + uuid.NewString() + "}"
	const workers, rounds = 16, 5

	var inside, overlaps, held atomic.Int64
	start := make(chan struct{})
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			<-start
			for range rounds {
				l, err := r.Acquire(t.Context(), key, Options{TTL: 10 * time.Second, Wait: 30 * time.Second})
				if err != nil {
					errs <- err
					return
				}
				if inside.Add(1) > 1 {
					overlaps.Add(1)
				}
				held.Add(1)
				runtime.Gosched() // give a wrongly admitted second holder the chance to overlap
				inside.Add(-1)
				if err := l.Release(t.Context()); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := overlaps.Load(); got != 0 {
		t.Errorf("%d acquisitions overlapped another holder", got)
	}
	if got, want := held.Load(), int64(workers*rounds); got != want {
		t.Errorf("%d acquisitions, want %d", got, want)
	}
}
