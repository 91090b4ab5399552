package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"seckill/internal/embedded"
	"seckill/internal/lab"
	"seckill/internal/lock"
)

// EtcdCluster is an etcd cluster whose members the drill may strike.
type EtcdCluster struct {
	Endpoints []string
	// Kill ends member i at once; Pause stops it until Resume.
	Kill, Pause, Resume func(i int) error
}

// The CP drills' timing: a lease of cpTTL (above etcd's minimum at any
// election timeout up to 2s), held across a fault for longer than the lease,
// so that only renewal keeps it.
const (
	cpTTL  = 3 * time.Second
	cpHold = 4500 * time.Millisecond
)

func etcdClient(endpoints []string) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: time.Second, Logger: embedded.NopLogger()})
	if err != nil {
		return nil, fmt.Errorf("etcd client of %v: %w", endpoints, err)
	}
	return cli, nil
}

// etcdClients makes a client of each endpoint list, as separate processes
// would have; closeAll closes them.
func etcdClients(lists ...[]string) (clis []*clientv3.Client, closeAll func(), err error) {
	closeAll = func() {
		for _, c := range clis {
			c.Close()
		}
	}
	for _, eps := range lists {
		cli, err := etcdClient(eps)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		clis = append(clis, cli)
	}
	return clis, closeAll, nil
}

// held starts A's take on d and returns once A holds the lock and has read.
func held(ctx context.Context, d *duel, h hand) (<-chan taken, error) {
	aDone, read, err := d.startA(ctx, h)
	if err != nil {
		return nil, err
	}
	if !read {
		a := <-aDone
		return nil, fmt.Errorf("A was refused the lock: %w", a.err)
	}
	return aDone, nil
}

func connect(cli *clientv3.Client) lock.EtcdConnect {
	return func(context.Context) (*clientv3.Client, error) { return cli, nil }
}

// leader returns the index of the cluster's leader among endpoints.
func leader(ctx context.Context, cli *clientv3.Client, endpoints []string) (int, error) {
	for i, ep := range endpoints {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, ep)
		cancel()
		if err == nil && st.Leader != 0 && st.Header.MemberId == st.Leader {
			return i, nil
		}
	}
	return 0, errors.New("no member says it is the leader")
}

// EtcdLeaderKill is the CP half of ap-vs-cp: A holds the etcd lock of a
// 3-member cluster and reads; the leader is killed; B asks for the lock and
// waits. A grant is answered only once a majority has it, so the new leader
// knows A's key and A's session: A's keep-alive reaches it through another
// member, A writes, releases, and only then is B granted the lock, to find
// the unit sold.
func EtcdLeaderKill(ctx context.Context, storeAddr string, c EtcdCluster, variant string) (Outcome, error) {
	out := Outcome{Variant: variant, Initial: 1}
	// Two clients, as two processes would have, each of every member.
	clis, closeAll, err := etcdClients(c.Endpoints, c.Endpoints)
	if err != nil {
		return out, err
	}
	defer closeAll()
	cliA, cliB := clis[0], clis[1]
	d, err := newDuel(ctx, storeAddr)
	if err != nil {
		return out, err
	}
	defer d.Close()
	aDone, err := held(ctx, d, hand{locker: lock.NewEtcd(connect(cliA)), opt: lock.Options{TTL: cpTTL}, hold: cpHold})
	if err != nil {
		return out, err
	}
	l, err := leader(ctx, cliB, c.Endpoints)
	if err != nil {
		return out, err
	}
	if err := c.Kill(l); err != nil {
		return out, fmt.Errorf("killing the leader: %w", err)
	}
	killed := time.Now()
	// B retries while the cluster elects a leader (its client also has to
	// find a member alive), as a buyer retries a 503 unavailable.
	var b taken
	for tries := 0; ; tries++ {
		b = d.take(ctx, 2, hand{locker: lock.NewEtcd(connect(cliB)), opt: lock.Options{TTL: cpTTL, Wait: 3 * cpTTL}})
		if !errors.Is(b.err, lock.ErrEtcdUnavailable) || time.Since(killed) > 3*cpTTL {
			break
		}
	}
	a := <-aDone
	if err := judge(&out, a, b); err != nil {
		return out, err
	}
	second := "B was granted the lock only after A had written"
	if b.at.Before(a.at) {
		second = "B finished before A: a second holder"
	}
	out.Detail = fmt.Sprintf("leader (member %d) killed with A's read in hand; A %s %s after the kill; %s, and %s",
		l, said(a), a.at.Sub(killed).Round(10*time.Millisecond), second, said(b))
	return out, nil
}

// EtcdPartition is the minority partition: A's client reaches only member
// x, a follower, which is then cut off (paused); A cannot renew, its lease
// expires on the majority, which grants the lock to B. A does not look at
// lock.Lost (a holder that does not know, as a paused one would not): only
// the fence stands between its stale write and the stock.
func EtcdPartition(ctx context.Context, storeAddr string, c EtcdCluster, variant string) (Outcome, error) {
	out := Outcome{Variant: variant, Initial: 1}
	probe, err := etcdClient(c.Endpoints)
	if err != nil {
		return out, err
	}
	defer probe.Close()
	l, err := leader(ctx, probe, c.Endpoints)
	if err != nil {
		return out, err
	}
	x := (l + 1) % len(c.Endpoints)
	var majority []string
	for i, ep := range c.Endpoints {
		if i != x {
			majority = append(majority, ep)
		}
	}
	clis, closeAll, err := etcdClients([]string{c.Endpoints[x]}, majority)
	if err != nil {
		return out, err
	}
	defer closeAll()
	cliA, cliB := clis[0], clis[1]
	d, err := newDuel(ctx, storeAddr)
	if err != nil {
		return out, err
	}
	defer d.Close()
	aDone, err := held(ctx, d, hand{locker: blind{lock.NewEtcd(connect(cliA))}, opt: lock.Options{TTL: cpTTL}, hold: 3 * cpTTL})
	if err != nil {
		return out, err
	}
	if err := c.Pause(x); err != nil {
		return out, fmt.Errorf("cutting member %d off: %w", x, err)
	}
	cut := time.Now()
	b := d.take(ctx, 2, hand{locker: lock.NewEtcd(connect(cliB)), opt: lock.Options{TTL: cpTTL, Wait: 3 * cpTTL}})
	rerr := c.Resume(x)
	a := <-aDone
	if err := judge(&out, a, b); err != nil {
		return out, err
	}
	if rerr != nil {
		return out, fmt.Errorf("resuming member %d: %w", x, rerr)
	}
	out.Detail = fmt.Sprintf("A's only member (%d, a follower) cut off; the majority granted B the lock %s later and B %s; A %s",
		x, b.at.Sub(cut).Round(100*time.Millisecond), said(b), said(a))
	return out, nil
}

// EtcdPause is etcd's side of the pause scenario: A's keep-alive stops (as
// a paused process's does) while it holds its read past its lease; etcd
// expires the session and grants B the lock; A wakes and writes. Without
// the fence (fence false: A's lease carries no token) the stale write lands.
func EtcdPause(ctx context.Context, storeAddr string, endpoints []string, fence bool, variant string) (Outcome, error) {
	out := Outcome{Variant: variant, Initial: 1}
	cli, err := etcdClient(endpoints)
	if err != nil {
		return out, err
	}
	defer cli.Close()
	d, err := newDuel(ctx, storeAddr)
	if err != nil {
		return out, err
	}
	defer d.Close()
	var l lock.Locker = lock.NewEtcd(connect(cli))
	if !fence {
		l = lab.Unfenced{Locker: l}
	}
	// A's lease is at least 1s and at most etcd's minimum (2s at etcd's
	// default timing); A holds its read for twice that.
	aDone, err := held(ctx, d, hand{locker: l, opt: lock.Options{TTL: time.Second}, hold: 4 * time.Second, abandon: true})
	if err != nil {
		return out, err
	}
	b := d.take(ctx, 2, hand{locker: l, opt: lock.Options{TTL: time.Second, Wait: 10 * time.Second}})
	a := <-aDone
	if err := judge(&out, a, b); err != nil {
		return out, err
	}
	out.Detail = fmt.Sprintf("A's keep-alive stopped with its read in hand; B %s; A, waking, %s", said(b), said(a))
	return out, nil
}

// blind hides lock.Lost: a holder that does not look, or cannot yet know.
type blind struct{ lock.Locker }

type blindLease struct{ lock.Lease }

func (b blind) Acquire(ctx context.Context, key string, opt lock.Options) (lock.Lease, error) {
	l, err := b.Locker.Acquire(ctx, key, opt)
	if err != nil {
		return nil, err
	}
	return blindLease{l}, nil
}

func (b blindLease) Abandon() { lock.Abandon(b.Lease) }
