package testkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The helpers of the registries' race tests (the streams' in
// internal/outbox, the deadline sets' in internal/stock): a client hook
// that widens the windows between their steps, steps looped in the
// background, and the count of what a race left behind.

// SlowRegistry is a client hook that holds each script whose first key
// starts with Prefix (a registry) for up to Most before sending it: it
// widens the windows between a close and its drop, and between a writer's
// reading of a generation and its enrolment, that the registry's protocol
// must survive.
type SlowRegistry struct {
	Prefix string
	Most   time.Duration
}

func (h SlowRegistry) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h SlowRegistry) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if name := strings.ToLower(cmd.Name()); len(args) > 3 && strings.HasPrefix(name, "eval") &&
			strings.HasPrefix(fmt.Sprint(args[3]), h.Prefix) {
			time.Sleep(rand.N(h.Most))
		}
		return next(ctx, cmd)
	}
}

func (h SlowRegistry) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// RedisUnderTest is a Redis a test runs on: one server, or a cluster.
type RedisUnderTest struct {
	Name    string
	RDB     redis.UniversalClient
	Cluster bool
}

// OneRedisAndCluster are the shared Redis and a cluster of the test's own.
func OneRedisAndCluster(t *testing.T) []RedisUnderTest {
	one := redis.NewClient(&redis.Options{Addr: RealRedis(t).Addr()})
	t.Cleanup(func() { one.Close() })
	return []RedisUnderTest{{"one Redis", one, false}, {"cluster", NewRedisCluster(t).Client, true}}
}

// Loops runs each step in the background, again and again, until the stop
// it returns is called; stop waits for the steps to end.
func Loops(steps ...func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, step := range steps {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
					step()
				}
			}
		})
	}
	return func() { close(done); wg.Wait() }
}

// Missed runs last until it finds nothing more, and then counts the ids
// that are not in seen.
func Missed[ID comparable](t *testing.T, ids []ID, seen map[ID]bool, last func() (int, error)) int {
	t.Helper()
	for {
		n, err := last()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	missing := 0
	for _, id := range ids {
		if !seen[id] {
			missing++
		}
	}
	return missing
}
