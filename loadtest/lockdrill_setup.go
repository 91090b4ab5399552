package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/embedded"
	"seckill/internal/testkit/child"
)

// ErrNeedsRedisServer: the failover drill needs replication, which the
// embedded Redis does not have.
var ErrNeedsRedisServer = errors.New("needs redis-server on PATH: the embedded Redis has no replication")

// StartFailover starts a Redis master and its replica, replicating through
// a Link, as processes of the caller's own (redis-server; exe is a binary
// that calls child.Run), and sets the failover drill up on them with the
// stock on storeAddr. stop ends them all.
func StartFailover(ctx context.Context, exe, dir, storeAddr, lockName string, stderr io.Writer) (f Failover, stop func(), err error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return f, nil, ErrNeedsRedisServer
	}
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	start := func() (*child.Redis, *redis.Client, error) {
		r, err := child.StartRedis(ctx, exe, dir, logsOf(stderr))
		if err != nil {
			return nil, nil, err
		}
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr, DialerRetries: 1, MaxRetries: -1})
		stops = append(stops, r.Kill, func() { rdb.Close() })
		return r, rdb, nil
	}
	master, mc, err := start()
	if err != nil {
		return f, nil, err
	}
	_, rc, err := start()
	if err != nil {
		return f, nil, err
	}
	link, err := NewLink(master.Addr)
	if err != nil {
		return f, nil, err
	}
	stops = append(stops, func() { link.Close() })
	host, port, _ := net.SplitHostPort(link.Addr())
	if err := rc.ReplicaOf(ctx, host, port).Err(); err != nil {
		return f, nil, fmt.Errorf("REPLICAOF: %w", err)
	}
	return Failover{StoreAddr: storeAddr, Master: mc, Replica: rc, Lock: lockName,
		HoldBack: link.Cut, Restore: func() error { return nil },
		KillMaster: func() error { master.Kill(); return nil }}, stop, nil
}

// DrillTiming is the drills' Raft clock: elections in about half a second.
var DrillTiming = embedded.Timing{Tick: 50 * time.Millisecond, Election: 500 * time.Millisecond}

// StartEtcdCluster starts a 3-member etcd cluster of the caller's own (the
// etcd binary when on PATH, else exe serving embedded members) and returns
// it with the name of its kind. stop ends it.
func StartEtcdCluster(ctx context.Context, exe, dir string, stderr io.Writer) (c EtcdCluster, kind string, stop func(), err error) {
	procs, err := child.StartEtcdCluster(ctx, exe, dir, 3, DrillTiming, logsOf(stderr))
	if err != nil {
		return c, "", nil, err
	}
	stop = func() {
		for _, p := range procs {
			p.Kill()
		}
	}
	c = EtcdCluster{
		Kill:   func(i int) error { procs[i].Kill(); return nil },
		Pause:  func(i int) error { return procs[i].Pause() },
		Resume: func(i int) error { return procs[i].Resume() },
	}
	for _, p := range procs {
		c.Endpoints = append(c.Endpoints, p.ClientURL)
	}
	return c, procs[0].Kind, stop, nil
}
