package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/lock"
)

// Failover locks of the failover drill.
const (
	FailoverToken      = "token"        // SET NX PX on the master
	FailoverTokenWait  = "token+WAIT 1" // and WAIT 1: refused unless a replica has it
	FailoverFenced     = "fenced"       // the fenced strategy: its counter fails over with the lock
	FailoverFenceStore = "fenced-store" // a token drawn from the store that stock's fence checks
)

// Failover is the failure every Redis lock has under replication (seed 003;
// the Redis documentation's distributed-lock page): the master grants the
// lock and dies before its replica has it; the replica is promoted and grants
// the same lock to a second holder.
type Failover struct {
	// StoreAddr is the Redis that holds the stock: it is not the lock's,
	// and it does not fail over.
	StoreAddr string
	// Master is the lock's Redis; Replica replicates it, in sync.
	Master, Replica *redis.Client
	// HoldBack stops replication (see Link.Cut); Restore undoes what
	// HoldBack did to a process, if anything.
	HoldBack, Restore func() error
	// KillMaster ends the master at once.
	KillMaster func() error
	// Lock is one of the Failover* locks.
	Lock string
}

// failoverTTL is long: the lock is lost to the failover, not to expiry.
const (
	failoverTTL  = 10 * time.Second
	failoverHold = 1500 * time.Millisecond
	waitTimeout  = 100 * time.Millisecond
)

// Run holds back replication, lets A take the lock on the master and read
// the stock, kills the master, promotes the replica (REPLICAOF NO ONE) and
// lets B take the lock there; then A writes what it read.
func (f Failover) Run(ctx context.Context, variant string) (Outcome, error) {
	out := Outcome{Variant: variant, Initial: 1}
	if err := inSync(ctx, f.Master); err != nil {
		return out, err
	}
	d, err := newDuel(ctx, f.StoreAddr)
	if err != nil {
		return out, err
	}
	defer d.Close()
	lockA, closeA, err := f.locker(f.Master, d.store)
	if err != nil {
		return out, err
	}
	defer closeA()
	if err := f.HoldBack(); err != nil {
		return out, fmt.Errorf("holding replication back: %w", err)
	}
	restored := false
	defer func() {
		if !restored {
			f.Restore()
		}
	}()
	aDone, read, err := d.startA(ctx, hand{locker: lockA, opt: lock.Options{TTL: failoverTTL}, hold: failoverHold})
	if err != nil {
		return out, err
	}
	if err := f.KillMaster(); err != nil {
		return out, fmt.Errorf("killing the master: %w", err)
	}
	restored = true
	if err := f.Restore(); err != nil {
		return out, fmt.Errorf("resuming the replica: %w", err)
	}
	if err := f.Replica.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		return out, fmt.Errorf("promoting the replica: %w", err)
	}
	lockB, closeB, err := f.locker(f.Replica, d.store)
	if err != nil {
		return out, err
	}
	defer closeB()
	// Under token+WAIT B is refused too: the promoted replica has no
	// replica of its own, and WAIT 1 refuses every grant until one
	// attaches. Safety is bought with availability.
	b := d.take(ctx, 2, hand{locker: lockB, opt: lock.Options{TTL: failoverTTL, Wait: 2 * time.Second}})
	a := <-aDone
	if err := judge(&out, a, b); err != nil {
		return out, err
	}
	aNote := "A refused the lock on the master (no replica acknowledged it)"
	if read {
		aNote = "A took the lock on the master and read; master killed, replica promoted"
	}
	out.Detail = fmt.Sprintf("%s; B %s; A %s", aNote, said(b), said(a))
	return out, nil
}

// locker is f.Lock on rdb. The returned func closes what it made.
func (f Failover) locker(rdb *redis.Client, store *redis.Client) (lock.Locker, func(), error) {
	switch f.Lock {
	case FailoverToken:
		t := lock.NewToken(rdb)
		return t, func() { t.Close() }, nil
	case FailoverFenced:
		t := lock.NewFenced(rdb)
		return t, func() { t.Close() }, nil
	case FailoverFenceStore:
		t := lock.NewToken(rdb)
		return storeFence{Locker: t, store: store}, func() { t.Close() }, nil
	case FailoverTokenWait:
		// WAIT counts the replicas that have every write this connection
		// sent: the SET and the WAIT must share one, hence a client of one.
		opt := *rdb.Options()
		opt.PoolSize, opt.MinIdleConns = 1, 0
		one := redis.NewClient(&opt)
		t := lock.NewToken(one)
		return waitLocker{Locker: t, rdb: one}, func() { t.Close(); one.Close() }, nil
	}
	return nil, nil, fmt.Errorf("failover drill: no lock %q", f.Lock)
}

// waitLocker refuses a lock that no replica has acknowledged within
// waitTimeout, as Redisson does by default: a grant only the master knows
// is a grant a failover can lose.
type waitLocker struct {
	lock.Locker
	rdb *redis.Client
}

func (w waitLocker) Acquire(ctx context.Context, key string, opt lock.Options) (lock.Lease, error) {
	l, err := w.Locker.Acquire(ctx, key, opt)
	if err != nil {
		return nil, err
	}
	n, err := w.rdb.Wait(ctx, 1, waitTimeout).Result()
	if err == nil && n >= 1 {
		return l, nil
	}
	rerr := l.Release(ctx)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("lock %s: WAIT 1: %w", key, err), rerr)
	}
	return nil, fmt.Errorf("%w: lock %s: no replica acknowledged it within %s", lock.ErrNotObtained, key, waitTimeout)
}

// inSync checks that the master has a replica whose offset is its own.
func inSync(ctx context.Context, master *redis.Client) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := master.Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("the master's replication: %w", err)
		}
		if field(info, "connected_slaves") == "1" && strings.Contains(field(info, "slave0"), "state=online") &&
			strings.Contains(field(info, "slave0"), "offset="+field(info, "master_repl_offset")+",") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the replica did not catch up with the master within 10s:\n%s", info)
		}
		time.Sleep(10 * time.Millisecond) // polling the replica's state, with a deadline
	}
}

// field returns name's value in an INFO reply.
func field(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
