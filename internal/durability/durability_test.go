package durability_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"seckill/internal/durability"
	"seckill/internal/embedded"
	"seckill/internal/testkit"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		appendonly, fsync, save string
		want                    durability.Level
		reason                  string
	}{
		{"no", "everysec", "", durability.None, "appendonly is no"},
		{"no", "everysec", "3600 1 300 100", durability.None, `save is "3600 1 300 100"`},
		{"yes", "everysec", "", durability.Everysec, "appendfsync is everysec"},
		{"yes", "no", "", durability.Everysec, "appendfsync is no"},
		{"yes", "always", "3600 1", durability.Always, "appendfsync is always"},
	} {
		r := durability.Classify(tc.appendonly, tc.fsync, tc.save)
		if r.Level != tc.want || !strings.Contains(r.Reason, tc.reason) {
			t.Errorf("appendonly %s, appendfsync %s, save %q: %s (%s); want %s naming %q", tc.appendonly, tc.fsync, tc.save, r.Level, r.Reason, tc.want, tc.reason)
		}
	}
}

// Read on the test's Redis: REDIS_ADDR's or a redis-server of its own
// (CONFIG GET answers), or the embedded one (no CONFIG, no INFO persistence: none, saying why). Only a
// Redis with an append-only file is anything but none.
func TestRead(t *testing.T) {
	w := durability.NewWatch(testkit.RealRedis(t).Client, 0, nil)
	r, err := w.Get(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s", r.Level, r.Reason)
	if r.Reason == "" || r.At.IsZero() {
		t.Errorf("reading %+v: want a reason and a time", r)
	}
	if r.Level != durability.None && !strings.Contains(r.Reason, "appendonly is yes") && !strings.Contains(r.Reason, "aof_enabled:1") {
		t.Errorf("reading %+v: want none unless an append-only file is on", r)
	}
	if again, err := w.Get(t.Context()); err != nil || again.At != r.At {
		t.Errorf("a second reading within the age: %+v, %v; want the first", again, err)
	}
	w.Stale()
	if again, err := w.Get(t.Context()); err != nil || again.At == r.At {
		t.Errorf("a reading after Stale: %+v, %v; want a new one", again, err)
	}
}

// The embedded Redis (miniredis) knows no CONFIG: its durability is none,
// said plainly, not as the refusal it answered ("ERR unknown command
// `config`"), which read as a fault at every start and in every product's
// view (issue 41, finding 5).
func TestTheEmbeddedRedisKeepsNothingSaidPlainly(t *testing.T) {
	emb, err := embedded.StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.Close)
	c := redis.NewClient(&redis.Options{Addr: emb.Addr()})
	t.Cleanup(func() { c.Close() })
	r, err := durability.Read(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	if r.Level != durability.None || r.Reason != durability.KeepsNothing {
		t.Errorf("the embedded Redis: %s (%s); want %s (%s)", r.Level, r.Reason, durability.None, durability.KeepsNothing)
	}
	for _, raw := range []string{"ERR", "unknown command", "config", "not supported"} {
		if strings.Contains(r.Reason, raw) {
			t.Errorf("the reason %q repeats the server's refusal (%q)", r.Reason, raw)
		}
	}
}

// On a Redis Cluster every master is read, and the weakest decides: one
// master without an append-only file makes the cluster's durability none,
// naming that master.
func TestReadOnACluster(t *testing.T) {
	if !testkit.HaveRedisServer() {
		testkit.Skip(t, testkit.NoRedisServer, "needs redis-server on PATH: a cluster of the test's own, whose masters' settings it changes")
	}
	c := testkit.ProcessRedisCluster(t)
	ctx := t.Context()
	var mu sync.Mutex
	var masters []*redis.Client
	err := c.Client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters = append(masters, m)
		return m.ConfigSet(ctx, "appendonly", "yes").Err()
	})
	if err != nil || len(masters) < 2 {
		t.Fatalf("turning on the masters' append-only files: %v (%d masters)", err, len(masters))
	}
	if r, err := durability.Read(ctx, c.Client); err != nil || r.Level != durability.Everysec {
		t.Fatalf("every master with appendonly yes: %+v, %v; want everysec", r, err)
	}
	weak := masters[len(masters)-1]
	if err := weak.ConfigSet(ctx, "appendonly", "no").Err(); err != nil {
		t.Fatal(err)
	}
	r, err := durability.Read(ctx, c.Client)
	if addr := weak.Options().Addr; err != nil || r.Level != durability.None || !strings.HasPrefix(r.Reason, addr+": appendonly is no") {
		t.Errorf("master %s without: %+v, %v; want none naming it", addr, r, err)
	}
}
