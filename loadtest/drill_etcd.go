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
			Variants: []drillVariant{
				failoverVariant(FailoverToken, api.VerdictOversold),
				failoverVariant(FailoverTokenWait, api.VerdictOK),
				failoverVariant(FailoverFenced, api.VerdictOversold),
				failoverVariant(FailoverFenceStore, api.VerdictOK),
			},
		},
		lockDrill{
			Name: "etcd-pause",
			Variants: []drillVariant{
				etcdPauseVariant("etcd, no fence", false, api.VerdictOversold),
				etcdPauseVariant("etcd, revision fence", true, api.VerdictOK),
			},
		},
		lockDrill{
			Name: "ap-vs-cp",
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
