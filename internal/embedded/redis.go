// Package embedded holds embedded stand-ins for the servers the service
// needs, so that it runs, and its tests run, on a machine with nothing but Go:
// Redis (miniredis, StartRedis) and etcd (etcd's own server run in this
// process, StartSingle, or a cluster's members laid out by Layout).
package embedded

import (
	"fmt"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Redis is miniredis serving on loopback. miniredis expires keys only when
// its clock is moved, so a ticker moves it with the wall clock and TTLs run
// out in real time.
type Redis struct {
	mr   *miniredis.Miniredis
	stop chan struct{}
	wg   sync.WaitGroup
}

// ClockStep is how often the embedded Redis's clock catches up: the
// resolution of its key expiry.
const ClockStep = 10 * time.Millisecond

// StartRedis starts an embedded Redis on a free loopback port.
func StartRedis() (*Redis, error) {
	return StartRedisAt("127.0.0.1:0")
}

// StartRedisAt starts an empty embedded Redis on addr, for instance on the
// port of one that was closed, as a server restarted after a crash.
func StartRedisAt(addr string) (*Redis, error) {
	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr(addr); err != nil {
		return nil, fmt.Errorf("starting the embedded Redis on %s: %w", addr, err)
	}
	r := &Redis{mr: mr, stop: make(chan struct{})}
	last := time.Now()
	mr.SetTime(last)
	r.wg.Go(func() {
		t := time.NewTicker(ClockStep)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case now := <-t.C:
				mr.SetTime(now)
				mr.FastForward(now.Sub(last))
				last = now
			}
		}
	})
	return r, nil
}

// Addr is the host:port the server listens on; other processes on the
// machine can connect to it too.
func (r *Redis) Addr() string { return r.mr.Addr() }

// Miniredis is the server itself, for tests that inspect or steer it.
func (r *Redis) Miniredis() *miniredis.Miniredis { return r.mr }

// JumpClock moves the server's clock forward by d at once, as an operator's
// or NTP's step would: every key's time to live shrinks by d, and those
// with less left expire now. (A redis-server cannot be made to do this on
// one machine: libfaketime recurses into clock_gettime under the jemalloc
// that Debian's redis-server links, and the server never starts.)
func (r *Redis) JumpClock(d time.Duration) { r.mr.FastForward(d) }

// Close stops the clock and the server, closing its clients' connections.
func (r *Redis) Close() {
	close(r.stop)
	r.wg.Wait()
	r.mr.Close()
}
