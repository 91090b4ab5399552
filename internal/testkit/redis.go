// This file gives tests Redis servers, as net/http/httptest gives
// them HTTP servers: the one REDIS_ADDR names when it is set (as in CI), a
// redis-server of the test's own when one is on PATH, or else an embedded
// miniredis, so that the same tests run on a machine with nothing but Go.
//
// Every server listens on loopback TCP, so a second process the test starts
// can reach it at Addr.

package testkit

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"seckill/internal/embedded"
	"seckill/internal/freeport"
	"seckill/internal/testkit/child"
)

// RedisKind says what serves a RedisServer.
type RedisKind int

const (
	RedisExternal RedisKind = iota // the server REDIS_ADDR names, shared with other tests
	RedisProcess                   // a redis-server process of the test's own
	RedisEmbedded                  // a miniredis of the test's own, its clock on the wall clock's
)

func (k RedisKind) String() string {
	switch k {
	case RedisExternal:
		return "REDIS_ADDR"
	case RedisProcess:
		return "redis-server"
	case RedisEmbedded:
		return "miniredis"
	}
	return "unknown"
}

// RedisServer is a Redis server a test uses. Servers of the test's own are
// stopped when the test ends; the external one is left as it was, apart
// from the keys the test wrote.
type RedisServer struct {
	// Client is connected to the server and closed when the test ends. It
	// dials once, without retries, so that a stopped server fails at once.
	Client *redis.Client

	kind RedisKind
	addr string
	emb  *embedded.Redis  // RedisEmbedded: nil while stopped
	proc *child.RedisProc // RedisProcess
}

// NewRedis returns the server REDIS_ADDR names, or else an embedded one of the
// test's own: for tests whose behaviour miniredis has as Redis does.
func NewRedis(tb testing.TB) *RedisServer {
	tb.Helper()
	if s := externalRedis(tb); s != nil {
		return s
	}
	return startEmbeddedRedis(tb)
}

// RealRedis returns the server REDIS_ADDR names, or else a redis-server of the
// test's own when one is on PATH, or else an embedded one: for tests whose
// behaviour depends on the real server. It logs when it falls back to
// miniredis; the test says what miniredis does differently where that
// matters to it.
func RealRedis(tb testing.TB) *RedisServer {
	tb.Helper()
	if s := externalRedis(tb); s != nil {
		return s
	}
	if HaveRedisServer() {
		return startProcess(tb)
	}
	tb.Log("REDIS_ADDR is unset and redis-server is not on PATH: running on miniredis")
	return startEmbeddedRedis(tb)
}

// RedisNodes returns n independent servers that the test may stop and restart:
// redis-server processes when it is on PATH, else embedded ones.
func RedisNodes(tb testing.TB, n int) []*RedisServer {
	tb.Helper()
	start := startEmbeddedRedis
	if HaveRedisServer() {
		start = startProcess
	}
	nodes := make([]*RedisServer, n)
	for i := range nodes {
		nodes[i] = start(tb)
	}
	return nodes
}

// NewEmbeddedRedis returns an embedded server of the test's own, whatever is on
// PATH: for a test that must steer the server itself (its clock).
func NewEmbeddedRedis(tb testing.TB) *RedisServer {
	tb.Helper()
	return startEmbeddedRedis(tb)
}

// RedisClients returns the servers' clients.
func RedisClients(servers []*RedisServer) []*redis.Client {
	cs := make([]*redis.Client, len(servers))
	for i, s := range servers {
		cs[i] = s.Client
	}
	return cs
}

// HaveRedisServer reports whether redis-server is on PATH.
func HaveRedisServer() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// Addr is the server's host:port, on loopback unless REDIS_ADDR says
// otherwise; another process on the machine can connect to it.
func (s *RedisServer) Addr() string { return s.addr }

// RedisKind says what serves s.
func (s *RedisServer) Kind() RedisKind { return s.kind }

// Miniredis returns the embedded server, or nil if s is not embedded (or is
// stopped).
func (s *RedisServer) Miniredis() *miniredis.Miniredis {
	if s.emb == nil {
		return nil
	}
	return s.emb.Miniredis()
}

// JumpClock moves an embedded server's clock forward by d (see
// embedded.Redis.JumpClock); other servers' clocks are the machine's.
func (s *RedisServer) JumpClock(tb testing.TB, d time.Duration) {
	tb.Helper()
	if s.emb == nil {
		tb.Fatalf("testkit: only a running embedded server's clock can jump, not %s's", s.kind)
	}
	s.emb.JumpClock(d)
}

// Stop kills the server, as a crash would; its clients then fail to
// connect. The externalRedis server cannot be stopped.
func (s *RedisServer) Stop(tb testing.TB) {
	tb.Helper()
	switch s.kind {
	case RedisExternal:
		tb.Fatal("testkit: the server REDIS_ADDR names is shared: it cannot be stopped")
	case RedisProcess:
		s.proc.Stop()
	case RedisEmbedded:
		if s.emb != nil {
			s.emb.Close()
			s.emb = nil
		}
	}
}

// Restart starts a fresh, empty server on s's address, as a node that lost
// its memory in a crash, and waits until it answers. A redis-server loads
// the dump.rdb a SAVE left in its directory: then it is a server back from
// that snapshot.
func (s *RedisServer) Restart(tb testing.TB) {
	tb.Helper()
	s.Stop(tb)
	switch s.kind {
	case RedisProcess:
		if err := s.proc.Start(tb.Context(), s.Client); err != nil {
			tb.Fatalf("restarting redis-server: %v", err)
		}
	case RedisEmbedded:
		emb, err := embedded.StartRedisAt(s.addr)
		if err != nil {
			tb.Fatalf("restarting: %v", err)
		}
		s.emb = emb
		// The client's pool may still be refusing to dial after the
		// failures while the server was down.
		if err := child.WaitRedisReady(tb.Context(), s.addr, s.Client, nil); err != nil {
			tb.Fatalf("restarting: %v", err)
		}
	}
}

func externalRedis(tb testing.TB) *RedisServer {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		return nil
	}
	return &RedisServer{kind: RedisExternal, addr: addr, Client: newClient(tb, addr)}
}

func startEmbeddedRedis(tb testing.TB) *RedisServer {
	tb.Helper()
	// On a port of freeport's, not the kernel's: Restart binds it again.
	addr, err := freeport.Addr()
	if err != nil {
		tb.Fatal(err)
	}
	emb, err := embedded.StartRedisAt(addr)
	if err != nil {
		tb.Fatal(err)
	}
	s := &RedisServer{kind: RedisEmbedded, addr: emb.Addr(), emb: emb}
	tb.Cleanup(func() {
		if s.emb != nil {
			s.emb.Close()
		}
	})
	s.Client = newClient(tb, s.addr) // closed before the server: cleanups run last-in first-out
	return s
}

func newClient(tb testing.TB, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1})
	tb.Cleanup(func() { rdb.Close() })
	return rdb
}
