package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"seckill/internal/api"
	"seckill/internal/catalogue"
	"seckill/internal/durability"
	"seckill/internal/idgen"
	"seckill/internal/order"

	"seckill/internal/stock"
)

// NewAudit computes an audit's derived fields from its counts.
func NewAudit(product int64, initial, remaining, taken, orders, queued int) Audit {
	a := Audit{ProductID: product, Initial: initial, Remaining: remaining, Taken: taken, Orders: orders, Queued: queued}
	a.Oversold = max(0, orders-initial)
	a.LostUpdates = orders + queued - (initial - remaining)
	a.Unsettled = max(0, taken-orders-queued)
	switch {
	case a.Oversold > 0:
		a.Verdict = api.VerdictOversold
	case a.LostUpdates > 0:
		a.Verdict = api.VerdictInconsistent
	case a.LostUpdates < 0 || a.Unsettled > 0:
		a.Verdict = api.VerdictLost
	default:
		a.Verdict = api.VerdictOK
	}
	return a
}

// saleCounts are a sale's orders by shard (the live ones) and by status.
type saleCounts struct {
	perShard                []int
	unpaid, paid, cancelled int
}

// countSale counts the orders of the product's current sale by shard and
// status, in one query.
func (rec *Reconciler) countSale(ctx context.Context, p catalogue.Product) (saleCounts, error) {
	var rows []struct {
		Shard  int
		Status string
		N      int
	}
	err := rec.db.WithContext(ctx).Model(&order.Order{}).Select("shard, status, COUNT(*) AS n").
		Where("product_id = ? AND sale = ?", p.ID, p.Sale).Group("shard, status").Scan(&rows).Error
	if err != nil {
		return saleCounts{}, fmt.Errorf("counting orders of product %d: %w", p.ID, err)
	}
	c := saleCounts{perShard: make([]int, p.Shards)}
	for _, r := range rows {
		switch r.Status {
		case order.Unpaid:
			c.unpaid += r.N
		case order.Paid:
			c.paid += r.N
		case order.Cancelled:
			c.cancelled += r.N
			continue
		default: // void rows hold no unit
			continue
		}
		if r.Shard >= 0 && r.Shard < len(c.perShard) {
			c.perShard[r.Shard] += r.N
		}
	}
	return c, nil
}

// View is a product with its stock and sales.
type View struct {
	catalogue.Product
	Levels  []int // stock per shard, in shard order
	Sold    int   // live orders of the current sale
	SoldOut bool  // this process's sold-out flag
	// Durability is what Redis keeps of an answered write (a 202's order
	// in the async mode's stream, among others).
	Durability durability.Reading
}

// Remaining is the stock left over all shards.
func (v View) Remaining() int {
	n := 0
	for _, l := range v.Levels {
		n += l
	}
	return n
}

// Audit returns the product's view and its audit. The counts are read one
// after the other, so while purchases are in flight the audit may see a
// unit taken whose order is not written yet; it is exact on a quiet product.
// A product whose stock Redis lost is being rebuilt: order.ErrRebuilding.
//
// When the counts show more units than are gone while orders are queued,
// the queue may hold entries whose orders are written already (a consumer
// wrote them and could not acknowledge them: Redis restarted from its
// append-only file): it counts again, reading the queued entries' order
// ids with the stock, then which of them have rows, so that each unit is
// counted once (Replaying, the SETTLING verdict).
func (rec *Reconciler) Audit(ctx context.Context, id int64) (View, Audit, error) {
	v, a, err := rec.audit(ctx, id, false)
	if err == nil && a.LostUpdates > 0 && a.Queued > 0 && v.Store == string(stock.InRedis) {
		v, a, err = rec.audit(ctx, id, true)
	}
	if err != nil {
		return View{}, Audit{}, err
	}
	v.Durability = rec.cat.Durability(ctx)
	return v, a, nil
}

func (rec *Reconciler) audit(ctx context.Context, id int64, withQueue bool) (View, Audit, error) {
	p, err := rec.cat.Product(ctx, id)
	if err != nil {
		return View{}, Audit{}, err
	}
	v := View{Product: p, SoldOut: rec.stock.Flags().SoldOut(id)}
	// Read before everything it is compared with: an order told of since
	// is stored before it is told of, so it cannot be counted here and
	// missing there.
	told, err := rec.stock.Ledgers().ToldOf(ctx, id, p.Sale)
	if err != nil {
		return View{}, Audit{}, err
	}
	c, err := rec.countStock(ctx, p, withQueue)
	if errors.Is(err, stock.ErrNotLaidOut) {
		// Stale (reset elsewhere) or lost: read the product again to tell.
		if fresh, ferr := rec.cat.Refresh(ctx, id); ferr == nil && fresh.Epoch != p.Epoch {
			return rec.audit(ctx, id, withQueue)
		}
		rec.cat.RebuildLater(p)
		return View{}, Audit{}, fmt.Errorf("%w: product %d", order.ErrRebuilding, id)
	}
	if err != nil {
		return View{}, Audit{}, err
	}
	v.Levels = c.Levels
	sc, err := rec.countSale(ctx, p)
	if err != nil {
		return View{}, Audit{}, err
	}
	shards, totalQueued := shardAudits(p, c, sc.perShard)
	for _, sa := range shards {
		v.Sold += sa.Orders
	}
	taken := p.Initial - v.Remaining()
	if p.Store == string(stock.InRedis) {
		taken = c.Takes
	}
	replaying := 0
	if withQueue {
		// Read after the stock: an entry queued then and written since is
		// counted here, as it is in the orders.
		if replaying, err = rec.written(ctx, c.QueuedIDs); err != nil {
			return View{}, Audit{}, err
		}
	}
	a := NewAudit(id, p.Initial, v.Remaining(), taken, v.Sold, totalQueued-replaying)
	a.Queued, a.Replaying = totalQueued, replaying
	a.Shards = shards
	a.Sale = p.Sale
	a.Unpaid, a.Paid, a.Cancelled = sc.unpaid, sc.paid, sc.cancelled
	if rp := c.Repairs; rp.Restored+rp.Short > 0 {
		a.Repaired = &Repaired{Takes: rp.Restored + rp.Short, Units: rp.Restored, Short: rp.Short}
	}
	if a.DeadLettered, err = rec.stock.Queue().DeadLettered(ctx, id, p.Sale); err != nil {
		return View{}, Audit{}, err
	}
	if a.Reconciled, err = rec.LastReconciliation(ctx, id); err != nil {
		return View{}, Audit{}, err
	}
	judge(&a, p)
	a.told(told, totalQueued-replaying)
	return v, a, nil
}

// countStock counts what Redis holds of p: for a product kept in Redis its
// levels and takes, with the queue's entries if withQueue; for one kept in
// SQL only its levels (the rows are the takes).
func (rec *Reconciler) countStock(ctx context.Context, p catalogue.Product, withQueue bool) (stock.Counts, error) {
	switch {
	case p.Store == string(stock.InRedis) && withQueue:
		return rec.stock.Ledgers().CountWithQueue(ctx, p.Stock())
	case p.Store == string(stock.InRedis):
		return rec.stock.Ledgers().Count(ctx, p.Stock())
	}
	levels, err := rec.stock.Ledgers().Levels(ctx, p.Stock())
	return stock.Counts{Levels: levels}, err
}

// shardAudits lays out, shard by shard, what p started with, what Redis
// holds and queues (c) and the orders per shard, and the queued in all.
func shardAudits(p catalogue.Product, c stock.Counts, orders []int) ([]ShardAudit, int) {
	initial := stock.Split(p.Initial, p.Shards)
	var shards []ShardAudit
	queued := 0
	for k := range p.Shards {
		sa := ShardAudit{Shard: k, Initial: initial[k], Orders: orders[k]}
		if k < len(c.Levels) {
			sa.Remaining = c.Levels[k]
		}
		if k < len(c.Queued) {
			sa.Queued = c.Queued[k]
		}
		queued += sa.Queued
		shards = append(shards, sa)
	}
	return shards, queued
}

// told compares the orders the processes told of with what stores them:
// the rows of the sale in any status but void (a cancelled order was told
// of too), the queued entries not written yet (queued) and the dead
// letters. More told than stored is an acknowledgement lost, whatever the
// units say: TOLD_NOT_STORED, unless the verdict says worse or says what
// it cannot count (REBUILT).
func (a *Audit) told(told, queued int) {
	a.Told = told
	a.ToldNotStored = max(0, told-(a.Unpaid+a.Paid+a.Cancelled)-queued-a.DeadLettered)
	if a.ToldNotStored > 0 && (a.Verdict == api.VerdictOK || a.Verdict == api.VerdictSettling) {
		a.Verdict = api.VerdictToldNotStored
	}
}

// Drain tells how the current sale's queued orders reached their rows.
func (rec *Reconciler) Drain(ctx context.Context, id int64) (Drain, error) {
	_, a, err := rec.Audit(ctx, id)
	if err != nil {
		return Drain{}, err
	}
	p, err := rec.cat.Product(ctx, id)
	if err != nil {
		return Drain{}, err
	}
	var rows []order.Order
	err = rec.db.WithContext(ctx).Select("accepted_at", "created_at").
		Where("product_id = ? AND sale = ? AND mode IN ? AND status IN ?", id, p.Sale, order.QueuedModes(), order.LiveStatuses()).Find(&rows).Error
	if err != nil {
		return Drain{}, fmt.Errorf("reading the queued orders of product %d: %w", id, err)
	}
	d := Drain{Written: len(rows), Queued: a.Queued}
	lat := make([]float64, 0, len(rows))
	for _, o := range rows {
		if o.AcceptedAt != nil {
			lat = append(lat, float64(o.CreatedAt.Sub(*o.AcceptedAt).Microseconds())/1000)
		}
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		at := func(q float64) float64 { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
		d.P50MS, d.P99MS, d.MaxMS = at(0.50), at(0.99), lat[len(lat)-1]
	}
	return d, nil
}

// rebuiltNote is what an audit cannot count after a rebuild.
const rebuiltNote = "the orders answered 202 and still queued when Redis lost the stock: " +
	"the async mode's stream was lost with it, and an mq order of the lost layout is refused when it arrives (a dead letter); " +
	"their units are back on sale and their buyers find the orders missing or failed"

// judge sets an audit's verdict from what its counts cannot tell alone:
// queued entries whose orders are written already (SETTLING), and a
// rebuild that lost queued orders (REBUILT). Each only replaces OK, so a
// real fault is never hidden.
func judge(a *Audit, p catalogue.Product) {
	if p.RebuiltAt != nil {
		a.Rebuilt = &Rebuilt{At: *p.RebuiltAt, Uncounted: "nothing: every order was answered after its row was written"}
		if p.Lab || order.ModeOf(p).Queued {
			a.Rebuilt.Uncounted = rebuiltNote
			if a.Verdict == api.VerdictOK {
				a.Verdict = api.VerdictRebuilt
			}
		}
	}
	if a.Replaying > 0 && a.Verdict == api.VerdictOK {
		a.Verdict = api.VerdictSettling
	}
}

// written counts those of ids that have a row: an order in any status, or
// a void row.
func (rec *Reconciler) written(ctx context.Context, ids []idgen.ID) (int, error) {
	n := 0
	for chunk := range slices.Chunk(ids, 1000) {
		var c int64
		if err := rec.db.WithContext(ctx).Model(&order.Order{}).Where("id IN ?", chunk).Count(&c).Error; err != nil {
			return 0, fmt.Errorf("looking the queued orders up: %w", err)
		}
		n += int(c)
	}
	return n, nil
}
