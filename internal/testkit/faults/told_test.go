package faults_test

import (
	"strconv"
	"testing"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/order"
	"seckill/internal/stock"
)

// An order whose buyer was told 201 and that is then lost whole — its row,
// its take and its buyer's record gone, its unit back in the store, as a
// failover that lost a take and the queued order with it leaves it (issue
// 37: 3,000 taken, 3,000 rows, 3,001 told) — balances the units: the audit
// sees it all the same, because the instances count the orders they told
// of beside the stock, and it says TOLD_NOT_STORED, never OK.
func TestAuditSeesToldNotStored(t *testing.T) {
	srv := start(t, config(t, "", ""), app.Extras{})
	s := newSale(t, srv)
	s.reset(20, "none", api.ModeLua)
	outs := s.startBurst(10, 5).wait(t)
	if n := counts(outs)["201 "]; n != 10 {
		t.Fatalf("10 buyers of 20 units: %v; want 10 orders", counts(outs))
	}
	waitFor(t, "the audit counting the 10 orders told", func() bool { return s.audit().Told == 10 })
	if a := s.audit(); a.Verdict != api.VerdictOK || a.ToldNotStored != 0 {
		t.Fatalf("before the loss: %+v; want OK, nothing told and not stored", a)
	}

	// Lose the first buyer's order whole: its row, its take and its
	// buyer's record, and its unit back on its shard.
	st := s.read()
	lost := outs[0]
	e, ok := st.ledger[lost.user]
	if !ok {
		t.Fatalf("%v: no take in the ledger", lost)
	}
	if err := s.db.Where("id = ?", e.Order).Delete(&order.Order{}).Error; err != nil {
		t.Fatal(err)
	}
	l := stock.Layout{ID: s.product, Shards: st.p.Shards, Epoch: st.p.Epoch}
	ctx := t.Context()
	if err := s.rdb.HDel(ctx, l.LedgerKey(e.Shard), strconv.FormatInt(lost.user, 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.rdb.Del(ctx, l.BuyerKey(lost.user)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.rdb.IncrBy(ctx, l.StockKey(e.Shard), 1).Err(); err != nil {
		t.Fatal(err)
	}

	a := s.audit()
	t.Logf("after order %s was lost whole: %+v", e.Order, a)
	if a.Remaining+a.Orders != a.Initial || a.Unsettled != 0 || a.LostUpdates != 0 {
		t.Fatalf("the units do not balance: %+v; the test means to lose an order whose units balance", a)
	}
	if a.Told != 10 || a.ToldNotStored != 1 || a.Verdict != api.VerdictToldNotStored {
		t.Errorf("the audit: told %d, told and not stored %d, verdict %s; want 10, 1, %s",
			a.Told, a.ToldNotStored, a.Verdict, api.VerdictToldNotStored)
	}
}
