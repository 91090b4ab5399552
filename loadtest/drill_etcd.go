package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"seckill/internal/api"
	"seckill/internal/testkit/child"
)

// The drills of issue 12 and issue 11's failover: the Redis failover that
// loses a lock, etcd's paused holder, AP against CP, and the minority
// partition. Each variant starts the servers it strikes (a Redis master and
// replica, or a 3-member etcd cluster) and keeps the stock on the drill's
// store; they are kept in a list of their own so that the lockDrills table
// stays one line per family.
func init() {
	lockDrills = append(lockDrills,
		lockDrill{
			Name: "failover",
			Summary: "A Redis master and its replica; the replication link is cut (a forwarder stops passing the " +
				"master's stream: a partition of that one link). A takes the lock on the master and reads; the " +
				"master is killed, the replica promoted (REPLICAOF NO ONE) and B takes the same lock there. Plain token: " +
				"OVERSOLD. token+WAIT 1 (refuse a grant no replica acknowledged): A is refused, and so is B, since the " +
				"promoted replica has none of its own: never oversold, at the price of availability. fenced: OVERSOLD, " +
				"its counter failed over with the lock and B drew A's token again. A fence drawn from the store: OK. " +
				"Needs redis-server.",
			Variants: []drillVariant{
				failoverVariant(FailoverToken, api.VerdictOversold),
				failoverVariant(FailoverTokenWait, api.VerdictOK),
				failoverVariant(FailoverFenced, api.VerdictOversold),
				failoverVariant(FailoverFenceStore, api.VerdictOK),
			},
		},
		lockDrill{
			Name: "etcd-pause",
			Summary: "etcd's side of the pause scenario: A's keep-alive stops (as a paused process's does) with its " +
				"read in hand; etcd expires the session and grants B the lock; A wakes and writes. Without the fence " +
				"the stale write lands: OVERSOLD. With the grant's revision as the fencing token it is refused: OK. " +
				"On the etcd ETCD_ENDPOINTS names, else an embedded one.",
			Variants: []drillVariant{
				etcdPauseVariant("etcd, no fence", false, api.VerdictOversold),
				etcdPauseVariant("etcd, revision fence", true, api.VerdictOK),
			},
		},
		lockDrill{
			Name: "ap-vs-cp",
			Summary: "The same lock held across the death of the server that granted it. Redis (AP) answers before " +
				"replicating: master killed, replica promoted, a second holder: OVERSOLD. etcd (CP, 3 members) answers " +
				"a grant once a majority has it: the leader killed, the lock survives, B is granted it only after A " +
				"wrote: OK. The Redis row needs redis-server; the etcd members are the etcd binary when on PATH.",
			Variants: []drillVariant{
				failoverVariant(FailoverToken, api.VerdictOversold),
				{Name: "etcd, leader killed", Want: api.VerdictOK, Run: func(ctx context.Context, env *drillEnv) (Outcome, error) {
					return onEtcdCluster(ctx, func(c EtcdCluster) (Outcome, error) {
						return EtcdLeaderKill(ctx, env.store, c, "etcd, leader killed")
					})
				}},
			},
		},
		lockDrill{
			Name: "etcd-partition",
			Summary: "A minority partition of a 3-member etcd: the holder's only member (a follower) is cut off " +
				"(paused). The holder cannot renew; the majority expires its lease and grants B the lock; the " +
				"holder, unaware, writes its stale read and the revision fence refuses it: OK.",
			Variants: []drillVariant{{Name: "etcd, minority partition", Want: api.VerdictOK, Run: func(ctx context.Context, env *drillEnv) (Outcome, error) {
				return onEtcdCluster(ctx, func(c EtcdCluster) (Outcome, error) {
					return EtcdPartition(ctx, env.store, c, "etcd, minority partition")
				})
			}}},
		},
	)
}

// drillScratch is this binary and a temporary directory for the servers a
// variant starts; done removes the directory.
func drillScratch() (exe, dir string, done func(), err error) {
	if exe, err = os.Executable(); err != nil {
		return "", "", nil, fmt.Errorf("finding this binary: %w", err)
	}
	if dir, err = os.MkdirTemp("", "seckill-drill-"); err != nil {
		return "", "", nil, err
	}
	return exe, dir, func() { os.RemoveAll(dir) }, nil
}

func failoverVariant(lockName, want string) drillVariant {
	name := "redis failover, " + lockName
	return drillVariant{Name: name, Want: want, Run: func(ctx context.Context, env *drillEnv) (Outcome, error) {
		exe, dir, done, err := drillScratch()
		if err != nil {
			return Outcome{}, err
		}
		defer done()
		f, stop, err := StartFailover(ctx, exe, dir, env.store, lockName, io.Discard)
		if err != nil {
			return Outcome{}, err
		}
		defer stop()
		return f.Run(ctx, name)
	}}
}

func etcdPauseVariant(name string, fence bool, want string) drillVariant {
	return drillVariant{Name: name, Want: want, Run: func(ctx context.Context, env *drillEnv) (Outcome, error) {
		eps, stop, err := child.StartEtcd()
		if err != nil {
			return Outcome{}, err
		}
		defer stop()
		return EtcdPause(ctx, env.store, eps, fence, name)
	}}
}

// onEtcdCluster runs fn on a 3-member etcd cluster of its own.
func onEtcdCluster(ctx context.Context, fn func(EtcdCluster) (Outcome, error)) (Outcome, error) {
	exe, dir, done, err := drillScratch()
	if err != nil {
		return Outcome{}, err
	}
	defer done()
	c, _, stop, err := StartEtcdCluster(ctx, exe, dir, io.Discard)
	if err != nil {
		return Outcome{}, err
	}
	defer stop()
	return fn(c)
}
