package outbox

import (
	"slices"
	"testing"
	"time"

	"seckill/internal/idgen"
	"seckill/internal/stock"
	"seckill/internal/testkit"
)

// The registry's protocol on a cluster, step by step, in the two orders a
// race can give (see stock's registry.go): a take that opens a stream between a
// close and the close's drop from the registry, and an enrolment that
// arrives after a newer one. Either way the open stream stays enrolled.
// One miniredis stands for the cluster's nodes: the steps' order is what
// is tested, not the routing.
func TestRegistryKeepsAStreamOpenedDuringAClose(t *testing.T) {
	rdb := testkit.OneNodeCluster(t)
	s := stock.NewStore(rdb, nil)
	q := NewRedisStreams(s.Queue()).DrainIdle(0)
	p := stock.Product{Layout: stock.Layout{ID: 1, Shards: 1, Epoch: 1}, Where: stock.InRedis}
	ctx := t.Context()
	if err := s.LayOut(ctx, p, []int{5}, 5); err != nil {
		t.Fatal(err)
	}
	stream := p.StreamKey(0)
	take := func(user int64) {
		t.Helper()
		_, err := s.Take(ctx, stock.Request{Product: p, Taker: stock.Async{}, Ticket: stock.Ticket{User: user, Order: idgen.ID(1000 + user), Key: "k"}})
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
		gen, err := closeStreamScript.Run(ctx, rdb, []string{stream, p.ShardPendingKey(0), stock.GenerationKey(stream)}, 0).Int64()
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
	if _, err := stock.Unenrol(ctx, q.rdb, q.streams, stream, gen); err != nil {
		t.Fatal(err)
	}
	enrolled("a take between a close and its drop")

	drain()
	gen = closeOnly()
	take(3)
	// A writer that read an older generation enrols late.
	if err := stock.Enrol(ctx, q.rdb, q.streams, stream, "0"); err != nil {
		t.Fatal(err)
	}
	if _, err := stock.Unenrol(ctx, q.rdb, q.streams, stream, gen); err != nil {
		t.Fatal(err)
	}
	enrolled("an enrolment at an older generation after a newer one")
}
