package redistest_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"seckill/internal/redistest"
)

// TestCluster checks that a cluster's keys spread over its three masters:
// the client routes each key to the node of its slot.
func TestCluster(t *testing.T) {
	c := redistest.NewCluster(t)
	ctx := t.Context()
	const keys = 30
	for i := range keys {
		if err := c.Client.Set(ctx, "redistest:{k"+strconv.Itoa(i)+"}", i, 0).Err(); err != nil {
			t.Fatalf("SET on the cluster: %v", err)
		}
	}
	var (
		mu     sync.Mutex
		counts = map[string]int64{}
	)
	err := c.Client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		n, err := m.Eval(ctx, "return #redis.call('KEYS', 'redistest:*')", nil).Int64()
		mu.Lock()
		counts[m.Options().Addr] = n
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatalf("counting keys per master: %v", err)
	}
	var total int64
	for addr, n := range counts {
		if n == 0 {
			t.Errorf("master %s holds none of the %d keys: %v", addr, keys, counts)
		}
		total += n
	}
	if len(counts) != 3 || total != keys {
		t.Errorf("keys per master %v, want %d over 3 masters", counts, keys)
	}
}
