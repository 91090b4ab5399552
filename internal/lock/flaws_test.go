package lock

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Each test here drives one strategy into its flaw and asserts that the
// bad outcome happens. The interleavings are explicit: TTLs are short and
// each step waits for the previous one through the lock itself (an Acquire
// with a Wait) or a deadline, never a sleep that hopes to be long enough.

// acquire takes key or fails the test.
func acquire(t *testing.T, l Locker, key string, opt Options) Lease {
	t.Helper()
	lease, err := l.Acquire(t.Context(), key, opt)
	if err != nil {
		t.Fatalf("Acquire(%s, %+v): %v", key, opt, err)
	}
	return lease
}

// refused asserts that key cannot be acquired within wait.
func refused(t *testing.T, l Locker, key string, wait time.Duration) {
	t.Helper()
	lease, err := l.Acquire(t.Context(), key, Options{TTL: 5 * time.Second, Wait: wait})
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("Acquire(%s) while held = %v, %v; want ErrNotObtained", key, lease, err)
	}
}

// pttl returns the key's remaining TTL as Redis reports it: -1 for a key
// without expiry, -2 for no key (go-redis keeps those as nanoseconds).
func pttl(t *testing.T, rdb redis.UniversalClient, key string) time.Duration {
	t.Helper()
	d, err := rdb.PTTL(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

const (
	noExpiry = time.Duration(-1) // PTTL of a key without TTL
	shortTTL = 200 * time.Millisecond
	longTTL  = 10 * time.Second
	// patience bounds a wait that must succeed: far longer than shortTTL,
	// so only a bug makes it run out.
	patience = 5 * time.Second
)

func TestSetNXCrashedHolderLocksForever(t *testing.T) {
	b := testBackends(t)
	l, key := NewSetNX(b.Redis), newKey(t, b.Redis)

	acquire(t, l, key, Options{})
	// The holder crashes here: its lease is never released.

	refused(t, l, key, 3*shortTTL)
	if got := pttl(t, b.Redis, key); got != noExpiry {
		t.Fatalf("PTTL = %v; want -1: a key without expiry, which nothing will remove", got)
	}
	// Only a hand on the server frees it.
	if err := b.Redis.Del(t.Context(), key).Err(); err != nil {
		t.Fatal(err)
	}
	acquire(t, l, key, Options{})
}

func TestSetNXExpireCrashLeavesNoTTL(t *testing.T) {
	b := testBackends(t)
	l, key := NewSetNXExpire(b.Redis), newKey(t, b.Redis)

	// Without the crash, the key gets its TTL.
	lease := acquire(t, l, key, Options{TTL: longTTL})
	if got := pttl(t, b.Redis, key); got <= 0 {
		t.Fatalf("PTTL after a whole acquisition = %v; want > 0", got)
	}
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	_, err := l.Acquire(t.Context(), key, Options{TTL: shortTTL, Fault: Fault{CrashBeforeExpire: true}})
	if !errors.Is(err, ErrCrashed) {
		t.Fatalf("Acquire with CrashBeforeExpire = %v; want ErrCrashed", err)
	}
	if got := pttl(t, b.Redis, key); got != noExpiry {
		t.Fatalf("PTTL after a crash between SETNX and EXPIRE = %v; want -1", got)
	}
	// Long past the TTL the crashed holder asked for, the lock is still held.
	refused(t, l, key, 3*shortTTL)
	if got := pttl(t, b.Redis, key); got != noExpiry {
		t.Fatalf("PTTL = %v; want -1", got)
	}
}

func TestGetSetSkewedClockTakesOverLiveLock(t *testing.T) {
	b := testBackends(t)
	l, key := NewGetSet(b.Redis), newKey(t, b.Redis)

	a := acquire(t, l, key, Options{TTL: longTTL})
	// By an honest clock the lock is live.
	refused(t, l, key, 0)

	// A client whose clock runs ahead by more than the TTL reads A's stamp
	// as past, and takes the lock over while A holds it.
	skewed := acquire(t, l, key, Options{TTL: longTTL, Fault: Fault{ClockSkew: 2 * longTTL}})
	// A and the skewed client both hold the lock now. A's release, a plain
	// DEL, deletes the lock the skewed client holds.
	if err := a.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := skewed.Release(t.Context()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("skewed client's Release after A's = %v; want ErrNotHeld (A deleted its lock)", err)
	}
}

func TestGetSetTakesOverExpiredLock(t *testing.T) {
	b := testBackends(t)
	l, key := NewGetSet(b.Redis), newKey(t, b.Redis)

	acquire(t, l, key, Options{TTL: shortTTL})
	// The holder crashes. The key has no TTL: only the stamp expires.
	if got := pttl(t, b.Redis, key); got != noExpiry {
		t.Fatalf("PTTL = %v; want -1", got)
	}
	// A waiter takes over once the stamp has passed, by GETSET.
	lease := acquire(t, l, key, Options{TTL: longTTL, Wait: patience})
	if err := lease.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestLuaSetNXRetriedReleaseFreesSuccessor(t *testing.T) {
	b := testBackends(t)
	l, key := NewLuaSetNX(b.Redis), newKey(t, b.Redis)

	a := acquire(t, l, key, Options{TTL: longTTL})
	if got := pttl(t, b.Redis, key); got <= 0 {
		t.Fatalf("PTTL = %v; want > 0: SETNX and PEXPIRE are one script", got)
	}
	if err := a.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	acquire(t, l, key, Options{TTL: longTTL}) // B
	// A's release is sent again (a client retrying after a timeout): its DEL
	// deletes B's lock, because nothing in the lock says whose it is.
	if err := a.Release(t.Context()); err != nil {
		t.Fatalf("A's second Release = %v; want nil (it deleted B's lock)", err)
	}
	// C gets the lock while B, which has not released, is still inside:
	// two holders at once.
	acquire(t, l, key, Options{TTL: longTTL})
}

// pausedHolder runs the pause every TTL-based lock meets: A takes the lock
// with a short TTL and stops inside its critical section (a GC pause, a slow
// call) past its TTL; B, waiting, gets the lock while A still believes it
// holds it. It returns both leases, neither released.
func pausedHolder(t *testing.T, l Locker, key string) (a, b Lease) {
	t.Helper()
	a = acquire(t, l, key, Options{TTL: shortTTL})
	// A pauses here. B's Acquire returns once A's lease has expired, so it
	// waits exactly as long as A's pause must last.
	b = acquire(t, l, key, Options{TTL: longTTL, Wait: patience})
	return a, b
}

func TestSetNXPXPausedHolderDeletesSuccessor(t *testing.T) {
	b := testBackends(t)
	l, key := NewSetNXPX(b.Redis), newKey(t, b.Redis)

	a, _ := pausedHolder(t, l, key)
	// A and B overlap: A has not released. A wakes and releases: its DEL
	// deletes B's lock, and says nothing.
	if err := a.Release(t.Context()); err != nil {
		t.Fatalf("A's Release = %v; want nil: SETNX-PX cannot tell whose lock it deletes", err)
	}
	// C gets the lock while B, which has not released, is still inside:
	// two holders at once.
	acquire(t, l, key, Options{TTL: longTTL})
}

func TestTokenPausedHolderOverlaps(t *testing.T) {
	b := testBackends(t)
	l := NewToken(b.Redis)
	t.Cleanup(func() { l.Close() })
	key := newKey(t, b.Redis)

	a, bLease := pausedHolder(t, l, key)
	// A and B overlapped while A was paused: B holds the lock and A has not
	// released. The token keeps A from deleting B's lock...
	if err := a.Release(t.Context()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("A's Release after its TTL = %v; want ErrNotHeld", err)
	}
	// ...so B's lock stands and C is kept out.
	refused(t, l, key, 0)
	if err := bLease.Release(t.Context()); err != nil {
		t.Fatalf("B's Release = %v", err)
	}
}

func TestTokenNestedAcquireDeadlocks(t *testing.T) {
	b := testBackends(t)
	l := NewToken(b.Redis)
	t.Cleanup(func() { l.Close() })
	key := newKey(t, b.Redis)

	outer := acquire(t, l, key, Options{TTL: longTTL})
	// The holder calls code that locks the same key: it waits for itself
	// (with no Wait limit, for ever).
	refused(t, l, key, 3*shortTTL)
	if err := outer.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestReentrantNestedAcquire(t *testing.T) {
	b := testBackends(t)
	l := NewReentrant(b.Redis)
	t.Cleanup(func() { l.Close() })
	key := newKey(t, b.Redis)
	ctx := WithOwner(t.Context(), "order-7")

	outer, err := l.Acquire(ctx, key, Options{TTL: longTTL})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := l.Acquire(ctx, key, Options{TTL: longTTL})
	if err != nil {
		t.Fatalf("nested Acquire by the same owner = %v; want the lock", err)
	}
	// Another owner (no WithOwner: a fresh one) is kept out...
	refused(t, l, key, 0)
	if err := inner.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// ...until the last hold is released, not the first.
	refused(t, l, key, 0)
	if err := inner.Release(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("inner lease released twice = %v; want ErrNotHeld, not the outer hold taken off", err)
	}
	refused(t, l, key, 0)
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	acquire(t, l, key, Options{TTL: longTTL})
}

func TestWatchdogLongHoldKeepsLock(t *testing.T) {
	b := testBackends(t)
	l := NewWatchdog(b.Redis)
	t.Cleanup(func() { l.Close() })
	key := newKey(t, b.Redis)

	// Renewals come every 333ms: a machine would have to stall for two
	// thirds of a second to let the lock expire between them.
	const ttl = time.Second
	a := acquire(t, l, key, Options{TTL: ttl})
	// A pauses for two TTLs, while B waits through all of it: the renewals
	// keep A's lock, so B never enters beside A.
	refused(t, l, key, 2*ttl)
	select {
	case <-Lost(a):
		t.Fatal("A's lease reported lost while its renewals ran")
	default:
	}
	if err := a.Release(t.Context()); err != nil {
		t.Fatalf("A's Release after its pause = %v; want nil", err)
	}
	acquire(t, l, key, Options{TTL: ttl})
}

func TestWatchdogReportsLostLock(t *testing.T) {
	b := testBackends(t)
	l := NewWatchdog(b.Redis)
	t.Cleanup(func() { l.Close() })
	key := newKey(t, b.Redis)

	a := acquire(t, l, key, Options{TTL: shortTTL})
	// Someone deletes the lock (an operator, a failover that lost it).
	if err := b.Redis.Del(t.Context(), key).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-Lost(a):
	case <-time.After(patience):
		t.Fatal("Lost did not fire after the lock was deleted")
	}
	if err := a.Release(t.Context()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release after the lock was lost = %v; want ErrNotHeld", err)
	}
}

func TestWatchdogAbandonedLockExpires(t *testing.T) {
	b := testBackends(t)
	l := NewWatchdog(b.Redis)
	t.Cleanup(func() { l.Close() })
	key := newKey(t, b.Redis)

	a := acquire(t, l, key, Options{TTL: shortTTL})
	// The holder's process crashes: the renewals stop with it, and the
	// lock is not released.
	Abandon(a)
	// A waiter gets the lock once the last renewal's TTL runs out.
	acquire(t, l, key, Options{TTL: longTTL, Wait: patience})
}
