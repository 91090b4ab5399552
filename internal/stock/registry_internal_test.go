package stock

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"seckill/internal/idgen"
)

// The registry's protocol on a cluster, step by step, in the two orders a
// race can give (see registry.go): a take that opens a stream between a
// close and the close's drop from the registry, and an enrolment that
// arrives after a newer one. Either way the open stream stays enrolled.
// One miniredis stands for the cluster's nodes: the steps' order is what
// is tested, not the routing.
func TestRegistryKeepsAStreamOpenedDuringAClose(t *testing.T) {
	rdb := oneNodeCluster(t)
	s := NewStore(rdb, nil)
	q := s.Queue().DrainIdle(0)
	p := Product{Layout: Layout{ID: 1, Shards: 1, Epoch: 1}, Where: InRedis}
	ctx := t.Context()
	if err := s.LayOut(ctx, p, []int{5}, 5); err != nil {
		t.Fatal(err)
	}
	stream := p.StreamKey(0)
	take := func(user int64) {
		t.Helper()
		_, err := s.Take(ctx, Request{Product: p, Taker: Async{}, Ticket: Ticket{User: user, Order: idgen.ID(1000 + user), Key: "k"}})
		if err != nil {
			t.Fatalf("buyer %d: %v", user, err)
		}
	}
	drain := func() {
		t.Helper()
		good, _, err := q.Read(ctx, "c", []string{stream}, 10, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Ack(ctx, good); err != nil {
			t.Fatal(err)
		}
	}
	closeOnly := func() int64 {
		t.Helper()
		gen, err := closeStreamScript.Run(ctx, rdb, []string{stream, p.ShardPendingKey(0), generationKey(stream)}, 0).Int64()
		if err != nil || gen == 0 {
			t.Fatalf("closing the drained stream: generation %d, %v", gen, err)
		}
		return gen
	}
	enrolled := func(when string) {
		t.Helper()
		streams, err := q.Streams(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(streams, stream) {
			t.Errorf("%s: the open stream %s is not in the registry %v", when, stream, streams)
		}
	}

	take(1)
	drain()
	gen := closeOnly()
	take(2) // finds the stream closed: enrols it at gen, opens it
	if _, err := unenrol(ctx, q.rdb, q.streams, stream, gen); err != nil {
		t.Fatal(err)
	}
	enrolled("a take between a close and its drop")

	drain()
	gen = closeOnly()
	take(3)
	// A writer that read an older generation enrols late.
	if err := enrol(ctx, s.rdb, s.streams, stream, "0"); err != nil {
		t.Fatal(err)
	}
	if _, err := unenrol(ctx, q.rdb, q.streams, stream, gen); err != nil {
		t.Fatal(err)
	}
	enrolled("an enrolment at an older generation after a newer one")
}

// oneNodeCluster is a cluster client whose every slot is on one miniredis:
// the store takes the cluster's paths, and the test orders their steps.
func oneNodeCluster(t *testing.T) *redis.ClusterClient {
	mr := miniredis.RunT(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: mr.Addr()}}}}, nil
		},
	})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
