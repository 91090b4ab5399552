package lock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncpool "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"seckill/internal/embedded"
	"seckill/internal/testkit"
)

// benchTTL outlasts any wait in the benchmark, so that no lease expires
// under a holder and every op is one real acquire and release.
const benchTTL = 10 * time.Second

// errBusy marks a pair that did not obtain the lock in time: the harness
// tries again, and only successful pairs count as ops.
var errBusy = errors.New("busy")

// benchPair is one acquire (waiting while held) and its release.
type benchPair func(ctx context.Context, key string) error

// BenchmarkLock compares acquire+release of our strategies with the peer
// libraries, on the same redis-server processes in the same run: one node
// for the single-node locks, five for redlock and redsync's quorum. Each
// runs uncontended (g=1) and contended (g=8, g=64 goroutines on one key).
//
// Retry settings, chosen to be comparable: every lock waits for as long as
// the op may take (benchTTL), sleeping between attempts on the same
// jittered backoff, uniform in [d/2, d] with d doubling from 1ms to 64ms
// (our retry; peerBackoff for the peers). That backoff is the only wake-up
// of the peers and of redlock. Token, reentrant, watchdog and fenced are
// woken by release notices (see notices) and poll only for the frees that
// send none, at the 64ms cap from the start; giving bsm-redislock that same
// long poll instead does not make it faster here (it then relies on barging
// alone, in our runs), so the peers keep the short first steps they need
// to wake soon.
//
// Compare ratios within one run, and say how busy the machine was: where the
// CPUs idle between round trips (an otherwise quiet VM), every reply waits
// for a halted CPU to wake, and locks whose waiters keep the process busier
// (polling, losing attempts) get their replies sooner.
//
//	go test -run '^$' -bench BenchmarkLock -benchmem ./internal/lock/
func BenchmarkLock(b *testing.B) {
	if !testkit.HaveRedisServer() {
		b.Skip("redis-server is not on PATH: these numbers compare locks on Redis, and miniredis's would say nothing about them")
	}
	nodes := testkit.RedisNodes(b, 5)
	single, five := nodes[0].Client, testkit.RedisClients(nodes)
	var rts roundTrips
	for _, c := range five {
		c.AddHook(&rts)
	}

	type impl struct {
		name string
		pair func(b *testing.B) (benchPair, bool) // false: not available, skip
	}
	ours := func(name string, bk Backends) func(*testing.B) (benchPair, bool) {
		return func(b *testing.B) (benchPair, bool) {
			l, err := New(name, bk)
			if errors.Is(err, ErrUnknownStrategy) {
				return nil, false
			}
			if err != nil {
				b.Fatalf("New(%q): %v", name, err)
			}
			if c, ok := l.(io.Closer); ok {
				b.Cleanup(func() { c.Close() })
			}
			opt := Options{TTL: benchTTL, Wait: benchTTL}
			return func(ctx context.Context, key string) error {
				lease, err := l.Acquire(ctx, key, opt)
				if errors.Is(err, ErrNotObtained) {
					return errBusy
				}
				if err != nil {
					return err
				}
				return lease.Release(ctx)
			}, true
		}
	}
	impls := []impl{
		{"token", ours("token", Backends{Redis: single})},
		{"reentrant", ours("reentrant", Backends{Redis: single})},
		{"watchdog", ours("watchdog", Backends{Redis: single})},
		{"fenced", ours("fenced", Backends{Redis: single})},
		{"bsm-redislock", func(*testing.B) (benchPair, bool) { return redislockPair(single), true }},
		{"redsync-1", func(*testing.B) (benchPair, bool) { return redsyncPair(goredis.NewPool(single)), true }},
		{"etcd", func(b *testing.B) (benchPair, bool) {
			// Its RPCs (each a message sent: a unary call, or one on the
			// keep-alive stream) are counted as rtt/op, as Redis commands are.
			eps, kind := testkit.EtcdServer(b)
			b.Logf("etcd: %s", kind)
			cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: embedded.NopLogger(),
				DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(rts.unary), grpc.WithChainStreamInterceptor(rts.stream)}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cli.Close() })
			return ours("etcd", Backends{Etcd: func(context.Context) (*clientv3.Client, error) { return cli, nil }})(b)
		}},
		{"redlock-5", ours("redlock", Backends{Nodes: five})},
		{"redsync-5", func(*testing.B) (benchPair, bool) {
			pools := make([]redsyncpool.Pool, len(five))
			for i, c := range five {
				pools[i] = goredis.NewPool(c)
			}
			return redsyncPair(pools...), true
		}},
	}
	for _, im := range impls {
		for _, g := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("%s/g=%d", im.name, g), func(b *testing.B) {
				pair, ok := im.pair(b)
				if !ok {
					b.Skipf("%s is not registered", im.name)
				}
				before := rts.n.Load()
				runPairs(b, g, "bench:{"+rand.Text()+"}", pair)
				b.ReportMetric(float64(rts.n.Load()-before)/float64(b.N), "rtt/op")
			})
		}
	}
}

// runPairs has workers goroutines, released at once, do b.N successful
// acquire+release pairs between them on key, and reports ops/s.
func runPairs(b *testing.B, workers int, key string, pair benchPair) {
	b.ReportAllocs()
	ctx := b.Context()
	var left atomic.Int64
	left.Store(int64(b.N))
	gate := make(chan struct{})
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			<-gate
			for left.Add(-1) >= 0 {
				for {
					err := pair(ctx, key)
					if err == nil {
						break
					}
					if !errors.Is(err, errBusy) {
						errs <- err
						return
					}
				}
			}
		})
	}
	b.ResetTimer()
	close(gate)
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

// peerBackoff is our retry's backoff, for the peers: jittered, with d
// doubling from minBackoff to maxBackoff.
func peerBackoff(tries int) time.Duration {
	return jitter(min(minBackoff<<min(max(tries-1, 0), 6), maxBackoff))
}

// jitterBackoff is peerBackoff as a redislock.RetryStrategy.
type jitterBackoff struct{ tries int }

func (j *jitterBackoff) NextBackoff() time.Duration {
	j.tries++
	return peerBackoff(j.tries)
}

func redislockPair(rdb redislock.RedisClient) benchPair {
	client := redislock.New(rdb)
	return func(ctx context.Context, key string) error {
		// redislock gives up at the context's deadline, or after the TTL
		// without one.
		l, err := client.Obtain(ctx, key, benchTTL, &redislock.Options{RetryStrategy: &jitterBackoff{}})
		if errors.Is(err, redislock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
			return errBusy
		}
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
}

func redsyncPair(pools ...redsyncpool.Pool) benchPair {
	rs := redsync.New(pools...)
	opts := []redsync.Option{
		redsync.WithExpiry(benchTTL),
		redsync.WithTries(1 << 20), // in effect: until obtained, like the others
		redsync.WithRetryDelayFunc(peerBackoff),
	}
	return func(ctx context.Context, key string) error {
		m := rs.NewMutex(key, opts...)
		if err := m.LockContext(ctx); err != nil {
			var taken *redsync.ErrTaken
			if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
				return errBusy
			}
			return err
		}
		if ok, err := m.UnlockContext(ctx); !ok || err != nil {
			return fmt.Errorf("redsync unlock: %v, %w", ok, err)
		}
		return nil
	}
}

// roundTrips counts the commands clients send, one per round trip (a
// pipeline counts as one), so that the benchmark can report round trips per
// op, retries included.
type roundTrips struct{ n atomic.Int64 }

func (*roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// unary counts an etcd call.
func (r *roundTrips) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r.n.Add(1)
	return invoker(ctx, method, req, reply, cc, opts...)
}

// stream counts the messages sent on an etcd stream (the keep-alives).
func (r *roundTrips) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return countedStream{ClientStream: s, n: &r.n}, nil
}

type countedStream struct {
	grpc.ClientStream
	n *atomic.Int64
}

func (s countedStream) SendMsg(m any) error {
	s.n.Add(1)
	return s.ClientStream.SendMsg(m)
}
