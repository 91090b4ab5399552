package testkit

import (
	"errors"
	"testing"

	"seckill/internal/testkit/child"
)

// startProcess starts a redis-server of the test's own on a free port.

func startProcess(tb testing.TB) *RedisServer {
	tb.Helper()
	// A free port can be taken by someone else between our probe and the
	// server's bind; a server that exits at once is tried on another port.
	var lastErr error
	for range 5 {
		port, err := child.FreePort()
		if err != nil {
			tb.Fatal(err)
		}
		p := &child.RedisProc{Port: port, Dir: tb.TempDir()}
		s := &RedisServer{kind: RedisProcess, addr: p.Addr(), proc: p}
		tb.Cleanup(p.Stop)
		s.Client = newClient(tb, s.addr)
		if lastErr = p.Start(tb.Context(), s.Client); lastErr == nil {
			return s
		}
		if !errors.Is(lastErr, child.ErrRedisExited) {
			break
		}
	}
	tb.Fatalf("starting redis-server: %v", lastErr)
	return nil
}
