package child_test

import (
	"errors"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/app"
	"seckill/internal/testkit/child"
)

// TestMain lets this test binary be the children it starts.
func TestMain(m *testing.M) { child.Main(m.Run, app.StartChild) }

func exe(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A Redis of the test's own: paused, it answers nothing; resumed, it
// answers with what it held; restarted, it is empty on the same address.
func TestRedisPauseResumeRestart(t *testing.T) {
	r, err := child.StartRedis(t.Context(), exe(t), t.TempDir(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Kill)
	t.Logf("%s on %s", r.Kind, r.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr, ReadTimeout: 200 * time.Millisecond, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	ctx := t.Context()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Get(ctx, "k").Err(); err == nil {
		t.Error("a paused Redis answered")
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	if v, err := rdb.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("after the pause: %q, %v; want the value it held", v, err)
	}
	addr := r.Addr
	if err := r.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if r.Addr != addr {
		t.Errorf("restarted on %s, was on %s", r.Addr, addr)
	}
	deadline := time.Now().Add(5 * time.Second)
	err = rdb.Get(ctx, "k").Err()
	for err != nil && !errors.Is(err, redis.Nil) && time.Now().Before(deadline) {
		err = rdb.Get(ctx, "k").Err() // the connections to the old process fail first
	}
	if !errors.Is(err, redis.Nil) {
		t.Errorf("after the restart: %v, want the key gone", err)
	}
}

// An instance serves until it is killed, and is gone at once after.
func TestInstanceKilled(t *testing.T) {
	in, err := child.StartInstance(t.Context(), exe(t), []string{"-addr", "127.0.0.1:0", "-demo-stock", "0", "-log-level", "error"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Kill)
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(in.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
	in.Kill()
	select {
	case <-in.Exited():
	default:
		t.Fatal("Kill returned before the process exited")
	}
	if _, err := c.Get(in.URL + "/healthz"); err == nil {
		t.Error("a killed instance answered")
	}
}
