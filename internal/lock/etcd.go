package lock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
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

// Etcd is etcd's lock recipe (go.etcd.io/etcd/client/v3/concurrency): the
// lease of a session is the TTL, its keep-alive is the watchdog, and the
// lock is the oldest key under the lock's prefix (see etcdQueue, Mutex's
// lock with a faster wait). A write in etcd returns once a majority of the
// cluster has it, so a leader that dies takes no grant with it: the lock is
// CP where every Redis lock is AP.
//
// The fencing token is the lock key's create revision: holders are granted
// the lock in that order, so every grant of a key carries a token above all
// earlier ones, and the stock's fence (the same path the fenced strategy
// writes through) refuses a holder whose session expired once a newer
// holder has touched the shard.
//
// What it does not fix: a holder whose process is paused stops renewing
// with it, its lease expires, another holder is granted the lock, and the
// paused one, when it wakes, still believes it holds it until its
// keep-alive tells it otherwise. Only the fence saves the data.
//
// Each acquisition is a session of its own: the key is named by the
// session's lease, so two holders sharing a session would both be granted
// the lock.
//
// Round trips: LeaseGrant, the keep-alive stream's first renewal, one Txn
// (put if absent, read the oldest); while waiting, a Get and a Watch per
// holder ahead, and a Get of its own key; one LeaseRevoke to release (or to
// give up), which deletes the key with the lease. Renewals every TTL/3.
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
	rev, err := etcdQueue(ctx, cli, sess, EtcdPrefix+key+"/", opt.Wait)
	if err != nil {
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
	return &etcdLease{cli: cli, sess: sess, key: key, token: uint64(rev)}, nil
}

// etcdQueue is concurrency.Mutex's lock with one change. The session puts its
// key under pfx; the key's create revision is its place in the queue and the
// grant's fencing token; the oldest key holds the lock. A waiter watches the
// key just before its own until it is deleted, then looks again. Mutex
// watches from the revision its read saw, which the server files among its
// "unsynced" watchers and serves only every 100ms, so each contended handoff
// could lag up to 100ms (docs/BENCHMARKS.md); etcdQueue watches from the next
// revision, which the server serves at once. It returns the create revision.
func etcdQueue(ctx context.Context, cli *clientv3.Client, sess *concurrency.Session, pfx string, wait time.Duration) (int64, error) {
	myKey := fmt.Sprintf("%s%x", pfx, sess.Lease())
	tctx, cancel := context.WithTimeout(ctx, EtcdStep)
	// The lease is fresh, so the key is absent: put it, and read the
	// oldest key in the same transaction (one round trip when free).
	resp, err := cli.Txn(tctx).If(clientv3.Compare(clientv3.CreateRevision(myKey), "=", 0)).
		Then(clientv3.OpPut(myKey, "", clientv3.WithLease(sess.Lease())), clientv3.OpGet(pfx, clientv3.WithFirstCreate()...)).
		Commit()
	cancel()
	if err != nil {
		return 0, unanswered(ctx, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("the session's key %s exists already", myKey)
	}
	myRev := resp.Header.Revision
	if owner := resp.Responses[1].GetResponseRange().Kvs; len(owner) == 0 || owner[0].CreateRevision == myRev {
		return myRev, nil
	}
	if wait <= 0 {
		return 0, ErrNotObtained // the caller's revoke deletes the key
	}
	wctx, cancel := context.WithTimeoutCause(ctx, wait, ErrNotObtained)
	defer cancel()
	before := append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(myRev-1))
	for {
		g, err := cli.Get(wctx, pfx, before...)
		if err != nil {
			return 0, waitErr(ctx, wctx, err)
		}
		if len(g.Kvs) == 0 {
			break
		}
		if err := waitDeleted(wctx, cli, string(g.Kvs[0].Key), g.Header.Revision+1); err != nil {
			return 0, waitErr(ctx, wctx, err)
		}
	}
	// Everyone before us is gone; so may we be, if our lease lapsed.
	own, err := cli.Get(wctx, myKey)
	if err != nil {
		return 0, waitErr(ctx, wctx, err)
	}
	if len(own.Kvs) == 0 {
		// The waiter's own lease lapsed while it waited (its process was
		// paused): it did not get the lock, etcd is not at fault.
		return 0, fmt.Errorf("%w: the waiter's session expired while it waited", ErrNotObtained)
	}
	return myRev, nil
}

// waitDeleted returns once key is deleted at revision rev or later.
func waitDeleted(ctx context.Context, cli *clientv3.Client, key string, rev int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the watch
	for wr := range cli.Watch(ctx, key, clientv3.WithRev(rev), clientv3.WithFilterPut()) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return nil
			}
		}
	}
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return errors.New("the watch ended")
}

// waitErr says why a wait ended: the caller's context, the wait running
// out (ErrNotObtained), or etcd.
func waitErr(ctx, wctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case errors.Is(context.Cause(wctx), ErrNotObtained):
		return ErrNotObtained
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
