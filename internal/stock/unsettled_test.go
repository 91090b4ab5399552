package stock_test

import (
	"testing"
	"time"

	"seckill/internal/idgen"
	"seckill/internal/stock"
)

// TestSettledKnownUntilAMark: a read that found a layout without
// unsettled orders answers from memory, with no round trip, until a mark
// of its product is heard of, its epoch is not the one read, or it grows
// older than the store trusts it; a mark's own write tells the processes
// (MarkedChannel) in the same transaction.
func TestSettledKnownUntilAMark(t *testing.T) {
	f := newFixture(t)
	s := f.s.SettledFor(time.Hour)
	lg := s.Ledgers()
	l := stock.Layout{ID: 5, Shards: 2, Epoch: 3}
	if lg.KnownSettled(l) {
		t.Fatal("known settled before any read")
	}
	some, err := lg.AnyUnsettled(t.Context(), l)
	if err != nil || some {
		t.Fatalf("an empty layout: unsettled %v, %v", some, err)
	}
	if !lg.KnownSettled(l) {
		t.Fatal("a read that found none is not kept")
	}
	// Known: no round trip. A Redis that does not answer cannot tell.
	f.mr.SetError("down")
	if some, err := lg.AnyUnsettled(t.Context(), l); err != nil || some {
		t.Errorf("known settled, Redis down: unsettled %v, %v; want false from memory", some, err)
	}
	f.mr.SetError("")
	if lg.KnownSettled(stock.Layout{ID: 5, Shards: 2, Epoch: 4}) {
		t.Error("a read of epoch 3 answers for epoch 4")
	}

	// The process's own mark unmakes its "none" at once, before any
	// notice: on a Redis Cluster in a failover the notice came late, and
	// a final sold out was told while the marked take stood (CI on
	// 2f5e979: TestRebuildingOnlyWhenNothingWasTakenOnATakeover).
	if err := lg.MarkUnsettled(t.Context(), stock.Layout{ID: 5, Shards: 2, Epoch: 3}, idgen.ID(41)); err != nil {
		t.Fatal(err)
	}
	if lg.KnownSettled(l) {
		t.Fatal("known settled after this process marked an order, its notice not heard")
	}
	if err := lg.ForgetUnsettled(t.Context(), l, []idgen.ID{41}); err != nil {
		t.Fatal(err)
	}
	if some, err := lg.AnyUnsettled(t.Context(), l); err != nil || some || !lg.KnownSettled(l) {
		t.Fatalf("settled again: unsettled %v, %v, known %v", some, err, lg.KnownSettled(l))
	}

	sub := f.rdb.Subscribe(t.Context(), stock.MarkedChannel)
	defer sub.Close()
	if _, err := sub.Receive(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := lg.MarkUnsettled(t.Context(), l, idgen.ID(42)); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-sub.Channel():
		if m.Payload != "5" {
			t.Errorf("the mark's notice names %q, want product 5", m.Payload)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a mark told nobody")
	}
	lg.Marked(l.ID) // what the catalogue does with the notice
	if lg.KnownSettled(l) {
		t.Fatal("known settled after a mark was heard of")
	}
	if some, err := lg.AnyUnsettled(t.Context(), l); err != nil || !some {
		t.Errorf("after the mark: unsettled %v, %v; want true", some, err)
	}
	if lg.KnownSettled(l) {
		t.Error("a read that found a mark is kept as none")
	}
	if err := lg.ForgetUnsettled(t.Context(), l, []idgen.ID{42}); err != nil {
		t.Fatal(err)
	}
	if some, _ := lg.AnyUnsettled(t.Context(), l); some || !lg.KnownSettled(l) {
		t.Errorf("settled again: unsettled %v, known %v; want none, known", some, lg.KnownSettled(l))
	}
	lg.ForgetSettled()
	if lg.KnownSettled(l) {
		t.Error("known settled after every product was forgotten")
	}

	short := stock.NewStore(f.rdb, f.db).SettledFor(20 * time.Millisecond).Ledgers()
	if some, err := short.AnyUnsettled(t.Context(), l); err != nil || some {
		t.Fatalf("unsettled %v, %v", some, err)
	}
	time.Sleep(30 * time.Millisecond)
	if short.KnownSettled(l) {
		t.Error("a read older than the store trusts it still answers")
	}
}
