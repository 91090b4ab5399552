// Package redistest gives tests Redis servers, as net/http/httptest gives
// them HTTP servers: the one REDIS_ADDR names when it is set (as in CI), a
// redis-server of the test's own when one is on PATH, or else an embedded
// miniredis, so that the same tests run on a machine with nothing but Go.
//
// Every server listens on loopback TCP, so a second process the test starts
// can reach it at Addr.
package redistest

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"seckill/internal/embedded"
)

// Kind says what serves a Server.
type Kind int

const (
	External Kind = iota // the server REDIS_ADDR names, shared with other tests
	Process              // a redis-server process of the test's own
	Embedded             // a miniredis of the test's own, its clock on the wall clock's
)

func (k Kind) String() string {
	switch k {
	case External:
		return "REDIS_ADDR"
	case Process:
		return "redis-server"
	case Embedded:
		return "miniredis"
	}
	return "unknown"
}

// Server is a Redis server a test uses. Servers of the test's own are
// stopped when the test ends; the external one is left as it was, apart
// from the keys the test wrote.
type Server struct {
	// Client is connected to the server and closed when the test ends. It
	// dials once, without retries, so that a stopped server fails at once.
	Client *redis.Client

	kind Kind
	addr string
	emb  *embedded.Redis // Embedded: nil while stopped
	proc *process        // Process
}

// New returns the server REDIS_ADDR names, or else an embedded one of the
// test's own: for tests whose behaviour miniredis has as Redis does.
func New(tb testing.TB) *Server {
	tb.Helper()
	if s := external(tb); s != nil {
		return s
	}
	return startEmbedded(tb)
}

// Real returns the server REDIS_ADDR names, or else a redis-server of the
// test's own when one is on PATH, or else an embedded one: for tests whose
// behaviour depends on the real server. It logs when it falls back to
// miniredis; the test says what miniredis does differently where that
// matters to it.
func Real(tb testing.TB) *Server {
	tb.Helper()
	if s := external(tb); s != nil {
		return s
	}
	if HaveRedisServer() {
		return startProcess(tb)
	}
	tb.Log("REDIS_ADDR is unset and redis-server is not on PATH: running on miniredis")
	return startEmbedded(tb)
}

// Nodes returns n independent servers that the test may stop and restart:
// redis-server processes when it is on PATH, else embedded ones.
func Nodes(tb testing.TB, n int) []*Server {
	tb.Helper()
	start := startEmbedded
	if HaveRedisServer() {
		start = startProcess
	}
	nodes := make([]*Server, n)
	for i := range nodes {
		nodes[i] = start(tb)
	}
	return nodes
}

// NewEmbedded returns an embedded server of the test's own, whatever is on
// PATH: for a test that must steer the server itself (its clock).
func NewEmbedded(tb testing.TB) *Server {
	tb.Helper()
	return startEmbedded(tb)
}

// Clients returns the servers' clients.
func Clients(servers []*Server) []*redis.Client {
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
func (s *Server) Addr() string { return s.addr }

// Kind says what serves s.
func (s *Server) Kind() Kind { return s.kind }

// Miniredis returns the embedded server, or nil if s is not embedded (or is
// stopped).
func (s *Server) Miniredis() *miniredis.Miniredis {
	if s.emb == nil {
		return nil
	}
	return s.emb.Miniredis()
}

// JumpClock moves an embedded server's clock forward by d (see
// embedded.Redis.JumpClock); other servers' clocks are the machine's.
func (s *Server) JumpClock(tb testing.TB, d time.Duration) {
	tb.Helper()
	if s.emb == nil {
		tb.Fatalf("redistest: only a running embedded server's clock can jump, not %s's", s.kind)
	}
	s.emb.JumpClock(d)
}

// Stop kills the server, as a crash would; its clients then fail to
// connect. The external server cannot be stopped.
func (s *Server) Stop(tb testing.TB) {
	tb.Helper()
	switch s.kind {
	case External:
		tb.Fatal("redistest: the server REDIS_ADDR names is shared: it cannot be stopped")
	case Process:
		s.proc.stop()
	case Embedded:
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
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Stop(tb)
	switch s.kind {
	case Process:
		if err := s.proc.start(tb.Context(), s.Client); err != nil {
			tb.Fatalf("restarting redis-server: %v", err)
		}
	case Embedded:
		emb, err := embedded.StartRedisAt(s.addr)
		if err != nil {
			tb.Fatalf("restarting: %v", err)
		}
		s.emb = emb
		// The client's pool may still be refusing to dial after the
		// failures while the server was down.
		if err := waitReady(tb.Context(), s.addr, s.Client, nil); err != nil {
			tb.Fatalf("restarting: %v", err)
		}
	}
}

func external(tb testing.TB) *Server {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		return nil
	}
	return &Server{kind: External, addr: addr, Client: newClient(tb, addr)}
}

func startEmbedded(tb testing.TB) *Server {
	tb.Helper()
	emb, err := embedded.StartRedis()
	if err != nil {
		tb.Fatal(err)
	}
	s := &Server{kind: Embedded, addr: emb.Addr(), emb: emb}
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
