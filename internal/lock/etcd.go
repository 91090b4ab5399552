package lock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// EtcdConnect returns the etcd client the etcd strategy locks on. It is
// called on every acquisition, so that etcd (or the embedded one) is reached,
// or started, only when the strategy is first used; it returns the same
// client each time once it has one.
type EtcdConnect func(context.Context) (*clientv3.Client, error)

// EtcdStep bounds each call to etcd that has no wait of its own (granting a
// lease, a fail-fast attempt, the release): an etcd that does not answer
// must make a purchase fail in moments, not hang. Raft commits a write on a
// majority in a few milliseconds on loopback.
const EtcdStep = 2 * time.Second

// EtcdPrefix is where the etcd strategy keeps its lock keys.
const EtcdPrefix = "seckill/lock/"

// Etcd is etcd's lock (go.etcd.io/etcd/client/v3/concurrency): the lease of
// a session is the TTL, its keep-alive is the watchdog, and the lock is the
// oldest key under the lock's prefix. A write in etcd returns once a
// majority of the cluster has it, so a leader that dies takes no grant with
// it: the lock is CP where every Redis lock is AP.
//
// The fencing token is the revision at which the grant was seen: the lock
// key's create revision when the lock was free, and in any case above the
// revision at which every earlier holder's key was deleted. So every grant
// of a key carries a token above all earlier ones, and the stock's fence
// (the same path the fenced strategy writes through) refuses a holder whose
// session expired once a newer holder has touched the shard.
//
// What it does not fix: a holder whose process is paused stops renewing
// with it, its lease expires, another holder is granted the lock, and the
// paused one, when it wakes, still believes it holds it until its
// keep-alive tells it otherwise. Only the fence saves the data.
//
// Each acquisition is a session of its own: concurrency.Mutex keys the lock
// by the session's lease, so two holders sharing a session would both be
// granted it.
//
// Round trips: LeaseGrant, the keep-alive stream's first renewal, one Txn
// (put if absent, read the oldest); a Watch and a Get while waiting, a
// Delete when a fail-fast attempt finds the lock held; one LeaseRevoke to
// release, which deletes the key with the lease. Renewals every TTL/3.
type Etcd struct {
	connect EtcdConnect
}

var _ Locker = (*Etcd)(nil)

// NewEtcd returns an etcd lock on the client connect returns.
func NewEtcd(connect EtcdConnect) *Etcd { return &Etcd{connect: connect} }

func newEtcdBackends(b Backends) (Locker, error) {
	if b.Etcd == nil {
		return nil, fmt.Errorf("%w: the etcd lock needs etcd (set ETCD_ENDPOINTS, or leave it unset for the embedded one)", ErrUnsupported)
	}
	return NewEtcd(b.Etcd), nil
}

// ErrEtcdUnavailable: etcd did not answer a step within EtcdStep.
var ErrEtcdUnavailable = errors.New("lock: etcd unavailable")

// ttlSeconds is the lease in whole seconds, etcd's unit, rounded up: a
// lease must not be shorter than asked. etcd raises it further to its own
// minimum (1.5 election timeouts, 2s by default).
func ttlSeconds(d time.Duration) int {
	return max(int(math.Ceil(d.Seconds())), 1)
}

// Acquire grants a lease, starts its keep-alive, and takes the mutex: at
// once, or waiting up to opt.Wait.
func (e *Etcd) Acquire(ctx context.Context, key string, opt Options) (Lease, error) {
	cctx, cancel := context.WithTimeout(ctx, EtcdStep)
	cli, err := e.connect(cctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w: connecting: %w", key, ErrEtcdUnavailable, err)
	}
	ttl := ttlSeconds(opt.ttl())
	gctx, cancel := context.WithTimeout(ctx, EtcdStep)
	grant, err := cli.Grant(gctx, int64(ttl))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w: granting a lease: %w", key, ErrEtcdUnavailable, unanswered(ctx, err))
	}
	// The keep-alive outlives Acquire's context (a request's): it ends
	// with the lease, and keeps the context's values.
	sess, err := concurrency.NewSession(cli, concurrency.WithLease(grant.ID), concurrency.WithTTL(ttl),
		concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		revoke(cli, grant.ID)
		return nil, fmt.Errorf("lock %s: starting the session's keep-alive: %w", key, err)
	}
	m := concurrency.NewMutex(sess, EtcdPrefix+key)
	if err := lockMutex(ctx, m, opt.Wait); err != nil {
		// Revoking the lease deletes a waiter's key with it. Not
		// sess.Close: its revoke may wait a whole TTL for an etcd that
		// does not answer.
		sess.Orphan()
		revoke(cli, grant.ID)
		if errors.Is(err, ErrNotObtained) || ctx.Err() != nil {
			return nil, err
		}
		return nil, fmt.Errorf("lock %s: %w: %w", key, ErrEtcdUnavailable, err)
	}
	return &etcdLease{cli: cli, sess: sess, key: key, token: uint64(m.Header().Revision)}, nil
}

// lockMutex takes m: one attempt when wait is zero, else waiting for the
// holders before it for up to wait.
func lockMutex(ctx context.Context, m *concurrency.Mutex, wait time.Duration) error {
	if wait <= 0 {
		tctx, cancel := context.WithTimeout(ctx, EtcdStep)
		defer cancel()
		err := m.TryLock(tctx)
		if errors.Is(err, concurrency.ErrLocked) {
			return ErrNotObtained
		}
		return unanswered(ctx, err)
	}
	wctx, cancel := context.WithTimeoutCause(ctx, wait, ErrNotObtained)
	defer cancel()
	err := m.Lock(wctx)
	if err != nil && ctx.Err() == nil && errors.Is(context.Cause(wctx), ErrNotObtained) {
		return ErrNotObtained
	}
	if errors.Is(err, concurrency.ErrSessionExpired) {
		// The waiter's own lease lapsed while it waited (its process was
		// paused): it did not get the lock, etcd is not at fault.
		return fmt.Errorf("%w: the waiter's session expired while it waited", ErrNotObtained)
	}
	if err != nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// unanswered names a step's deadline as etcd's silence, unless the caller's
// own context ended.
func unanswered(ctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within %s: %w", EtcdStep, err)
	}
	return err
}

// revoke gives a lease back, best effort: if it fails the lease expires.
func revoke(cli *clientv3.Client, id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), EtcdStep)
	defer cancel()
	_, _ = cli.Revoke(ctx, id)
}

type etcdLease struct {
	cli   *clientv3.Client
	sess  *concurrency.Session
	key   string
	token uint64

	mu     sync.Mutex
	halted bool          // released or abandoned: nobody watches any more
	lost   chan struct{} // made by Lost; closed when the session ends unasked
}

// Release stops the keep-alive and revokes the lease, which deletes the
// lock key with it: one round trip where Unlock and then closing the session
// would take two, and it says whether the lock was still this holder's
// (a lease that expired is not found).
func (l *etcdLease) Release(ctx context.Context) error {
	l.halt()
	ctx, cancel := context.WithTimeout(ctx, EtcdStep)
	defer cancel()
	_, err := l.cli.Revoke(ctx, l.sess.Lease())
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return ErrNotHeld
	case err != nil:
		return fmt.Errorf("lock %s: revoking the lease: %w", l.key, err)
	}
	return nil
}

func (l *etcdLease) Token() uint64 { return l.token }

// halt stops the keep-alive; the session's end is then no news.
func (l *etcdLease) halt() {
	l.mu.Lock()
	l.halted = true
	l.mu.Unlock()
	l.sess.Orphan()
}

// Lost is closed when the session ends by itself: its keep-alive found the
// lease expired or revoked, or had no answer for a whole TTL. It is made on
// first use: most holders never ask.
func (l *etcdLease) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost == nil {
		l.lost = make(chan struct{})
		select {
		case <-l.sess.Done():
			if !l.halted { // already ended: say so now, not in a moment
				close(l.lost)
			}
			return l.lost
		default:
		}
		if !l.halted {
			go func() {
				<-l.sess.Done()
				l.mu.Lock()
				defer l.mu.Unlock()
				if !l.halted {
					close(l.lost)
				}
			}()
		}
	}
	return l.lost
}

// Abandon stops the keep-alive without revoking the lease, as a crashed
// holder would: the lock lasts one more TTL.
func (l *etcdLease) Abandon() { l.halt() }
