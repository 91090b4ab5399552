package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/catalogue"
	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/order"
	"seckill/internal/stock"
)

// The reconciler finds the units that left the store without reaching an
// order: a take whose purchase died between the take and the INSERT (a
// killed process, a database that stopped answering), or whose outcome was
// left unknown. It compares each take in the product's ledger with the
// order rows of its sale; a take older than the grace period (longer than
// any purchase may still be in flight) whose order is neither there nor
// queued (the async mode, whose consumer writes it) is settled
// with a void row, and then its unit goes back and its buyer may buy again.
// A void row, not a read, because an INSERT that lost its answer can still
// commit later: the void row takes its id first, or finds it taken.
//
// Every process reconciles the products it sold recently, on a schedule,
// one process per product at a time (a lease in Redis); Reconcile runs a
// pass on demand.

func reconciledKey(id int64) string     { return fmt.Sprintf("seckill:reconciled:%d", id) }
func reconcileLeaseKey(id int64) string { return fmt.Sprintf("seckill:reconcile:%d", id) }

// ProductKeys are the Redis keys the service keeps per product beside the
// stock's (see stock.Purge): the reconciler's and the rebuild's.
func ProductKeys(id int64) []string {
	return []string{reconciledKey(id), reconcileLeaseKey(id), catalogue.RebuildKey(id)}
}

// ErrBusy: another process is reconciling the product right now.
var ErrBusy = errors.New("reconcile: another process holds the lease")

// Reconcile runs one pass over a product's current sale and returns it. It
// returns ErrBusy when another process is reconciling the product. It reads
// every order of the sale: it is the complete pass, whatever this process
// remembers from its scheduled ones.
func (rec *Reconciler) Reconcile(ctx context.Context, id int64) (Reconciliation, error) {
	return rec.pass(ctx, id, true)
}

// passState is what a pass leaves for the next scheduled pass of the same
// process over the same layout: the takes whose order it found live. Rows
// are never deleted, and an order that stops being live becomes cancelled
// or void, so a take settled once is still settled unless its order is
// among the sale's rows that are not live, which are few: the next pass
// reads those, and the orders of the other takes by id, instead of every
// order of the sale. It is replaced whole, never changed.
type passState struct {
	sale, epoch int64
	settled     map[int64]take // buyer → the take whose order was live
}

// take names one take: a buyer may hold two with one order id, one in each
// of two shards (a purchase retried with its key on another shard after
// its first take's answer was lost). Only the take on the order's shard is
// the order's; the other is a stray whose unit goes back.
type take struct {
	order idgen.ID
	shard int
}

// pass runs a pass; full reads every order of the sale, otherwise the
// pass starts from what this process's last pass over the layout settled.
func (rec *Reconciler) pass(ctx context.Context, id int64, full bool) (Reconciliation, error) {
	done, err := rec.enter()
	if err != nil {
		return Reconciliation{}, err
	}
	defer done()
	release, err := rec.lease(ctx, reconcileLeaseKey(id), rec.orders.Budget().Purchase())
	if err != nil {
		return Reconciliation{}, err
	}
	if release == nil {
		return Reconciliation{}, fmt.Errorf("%w: reconciling product %d", ErrBusy, id)
	}
	defer release()
	p, err := rec.cat.Refresh(ctx, id)
	if err != nil {
		return Reconciliation{}, err
	}
	var prev *passState
	if v, ok := rec.passes.Load(id); ok && !full {
		prev = v.(*passState)
	}
	r, next, err := rec.reconcile(ctx, p, prev)
	if err == nil && p.Store == string(stock.InRedis) {
		err = rec.forgetSettled(ctx, p)
	}
	if next != nil {
		rec.passes.Store(id, next)
	} else {
		rec.passes.Delete(id)
	}
	r.At = time.Now().UTC()
	if err != nil {
		r.Error = err.Error()
	}
	if b, jerr := json.Marshal(r); jerr == nil {
		if werr := rec.rdb.Set(ctx, reconciledKey(id), b, 0).Err(); werr != nil {
			rec.log.Warn("the reconciler's pass was not recorded", "product", id, "error", werr)
		}
	}
	if r.Returned > 0 {
		rec.cat.Returned(ctx, id)
	}
	return r, err
}

// idChunk bounds the ids of one "id IN ?" query.
const idChunk = 1000

// reconcile passes over p's current sale, from prev if it describes the
// same layout, and returns what the next pass may start from (nil: from
// nothing).
func (rec *Reconciler) reconcile(ctx context.Context, p catalogue.Product, prev *passState) (Reconciliation, *passState, error) {
	if p.Store != string(stock.InRedis) {
		// The db mode takes and writes in one transaction: only the
		// payment deadlines that never reached the delay queue are left.
		n, err := rec.orders.ExpireOverdue(ctx, p)
		return Reconciliation{Expired: n}, nil, err
	}
	if prev != nil && (prev.sale != p.Sale || prev.epoch != p.Epoch) {
		prev = nil
	}
	pr, err := rec.begin(ctx, p, prev)
	if err != nil {
		return pr.r, nil, err
	}
	candidates, err := pr.sort(ctx, prev)
	if err != nil {
		return pr.r, nil, err
	}
	if err := pr.settle(ctx, candidates); err != nil {
		return pr.r, nil, err
	}
	pr.countOrphans()
	if pr.r.Orphans > 0 {
		// The store forgot takes whose orders exist: take their units back.
		fixed, err := rec.restoreForgotten(ctx, p, pr.ledger, pr.locker)
		pr.r.Orphans, pr.r.Restored, pr.r.Short = fixed.Orphans, fixed.Restored, fixed.Short
		if err != nil {
			return pr.r, nil, err
		}
	}
	n, err := rec.orders.ExpireOverdue(ctx, p)
	pr.r.Expired = n
	return pr.r, pr.next, err
}

// passRun is one pass over a product's ledger.
type passRun struct {
	rec    *Reconciler
	p      catalogue.Product
	r      Reconciliation
	ledger []stock.Entry // every take: a buyer may hold two (stock.Ledgers.Entries)
	// over: takes whose purchases ended with their outcome unknown.
	over map[idgen.ID]bool
	// byID: the orders the pass looks at; those no take names are left.
	byID      map[idgen.ID]order.Order
	liveCount int // the sale's live orders, or -1: count byID's
	next      *passState
	matched   int // takes with a live order
	locker    lock.Locker
}

// begin reads what a pass compares: the ledger, the unsettled takes, the
// orders.
func (rec *Reconciler) begin(ctx context.Context, p catalogue.Product, prev *passState) (*passRun, error) {
	pr := &passRun{rec: rec, p: p}
	l := p.Stock().Layout
	var err error
	if pr.ledger, err = rec.stock.Ledgers().Entries(ctx, l); err != nil {
		return pr, err
	}
	// The takes of purchases that ended with their outcome unknown are
	// over: no grace to wait for (see docs/INVARIANT.md).
	if pr.over, err = rec.stock.Ledgers().Unsettled(ctx, l); err != nil {
		return pr, err
	}
	// On a Redis Cluster a take's buyer key is settled in a step of its
	// own, which a lost node or a dead process may have missed.
	if err := rec.stock.SettleBuyers(ctx, l, pr.ledger); err != nil {
		return pr, err
	}
	if pr.byID, pr.liveCount, err = rec.ordersOf(ctx, p, pr.ledger, prev); err != nil {
		return pr, err
	}
	pr.next = &passState{sale: p.Sale, epoch: p.Epoch, settled: make(map[int64]take, len(pr.ledger))}
	pr.r.Takes = len(pr.ledger)
	if order.ModeOf(p).Locked {
		if pr.locker, err = rec.cat.Locker(p.Lock); err != nil {
			return pr, err
		}
	}
	return pr, nil
}

// live notes a take whose order is live.
func (pr *passRun) live(e stock.Entry) {
	delete(pr.byID, e.Order)
	pr.next.settled[e.User] = take{e.Order, e.Shard}
	pr.matched++
}

// sort settles the takes with a live order, counts those still within
// their grace or held by the broker's queue as pending, and returns the
// rest: the candidates for a give-back.
func (pr *passRun) sort(ctx context.Context, prev *passState) ([]stock.Entry, error) {
	grace := time.Now().Add(-pr.rec.opt.Grace)
	depth := -1 // the broker's queue, read once, when an mq take asks
	var candidates []stock.Entry
	for _, e := range pr.ledger {
		o, ok := pr.byID[e.Order]
		if ok && o.Live() && o.Shard == e.Shard || !ok && prev != nil && prev.settled[e.User] == (take{e.Order, e.Shard}) {
			// Found live now, or live at the last pass and not among
			// the rows that are not live (ordersOf read them all).
			pr.live(e)
			continue
		}
		if e.At.After(grace) && !pr.over[e.Order] {
			pr.r.Pending++
			continue
		}
		// The mq mode: while the broker's queue holds messages, the take's
		// order may be one of them, and the client was told 202.
		if e.MQ {
			if depth < 0 {
				var err error
				if depth, err = pr.rec.queueDepth(ctx); err != nil {
					return nil, err
				}
				pr.r.Queue = depth
			}
			if depth > 0 {
				pr.r.Pending++
				pr.r.Held++
				continue
			}
		}
		candidates = append(candidates, e)
	}
	return candidates, nil
}

// settle decides each candidate: queued (the async mode: the consumer
// writes its order), written after all, or stranded, its unit given back.
func (pr *passRun) settle(ctx context.Context, candidates []stock.Entry) error {
	rec, p := pr.rec, pr.p
	// Asked in pipelines: a backlog of queued takes older than the grace
	// is thousands of them.
	queued, err := rec.stock.Queue().PendingAmong(ctx, p.Stock().Layout, candidates)
	if err != nil {
		return err
	}
	var queuedShards []int
	for _, e := range candidates {
		if queued[e.Order] {
			pr.r.Pending++
			if !slices.Contains(queuedShards, e.Shard) {
				queuedShards = append(queuedShards, e.Shard)
			}
			continue
		}
		now := time.Now()
		o := order.Order{ID: e.Order, ProductID: p.ID, Sale: p.Sale, UserID: e.User, Shard: e.Shard,
			Lock: p.Lock, Mode: p.Mode, Key: e.Key, AcceptedAt: &now, CreatedAt: now}
		row, err := rec.orders.Settle(ctx, o)
		if err != nil {
			return err
		}
		if row.Live() && row.Shard == e.Shard {
			pr.live(e)
			continue
		}
		// Void now, or the live order of a take on another shard: this
		// take's unit is in no order.
		req := stock.Request{Product: p.Stock(), Ticket: stock.Ticket{User: e.User, Order: e.Order, Key: e.Key},
			Taker: order.ModeOf(p).Taker(stock.Locked{Locker: pr.locker, Lock: lock.Options{TTL: rec.opt.LockTTL},
				GiveBackWait: rec.orders.Budget().GiveBackWait()})}
		back, err := rec.stock.GiveBack(ctx, req, stock.Taken{Entry: e})
		if err != nil {
			return err
		}
		if back {
			pr.r.Returned++
			rec.returned.Add(1)
			rec.log.Warn("returned a stranded unit", "product", p.ID, "shard", e.Shard, "order", e.Order, "user", e.User)
		}
	}
	// Takes still queued past the grace: their streams must be read. One
	// whose enrolment was lost (a failover, an earlier version's registry)
	// is enrolled again; an enrolled one is left as it is.
	return rec.stock.Queue().EnrolQueued(ctx, p.Stock().Layout, queuedShards)
}

// countOrphans counts the live orders no take names.
func (pr *passRun) countOrphans() {
	if pr.liveCount >= 0 {
		// Every live order is named by at most one take (ids are unique):
		// those no take names are the orphans. The count was read before
		// the rows, so an order written meanwhile is not one.
		pr.r.Orphans = max(pr.liveCount-pr.matched, 0)
		return
	}
	for _, o := range pr.byID {
		if o.Live() {
			pr.r.Orphans++
		}
	}
}

// ordersOf returns the orders that a pass over ledger must look at, by id.
// Without prev, every order of p's sale, and a live count of -1. From prev:
// the sale's rows that are not live (few: cancelled and void), the rows of
// the takes prev did not settle, by id, and the number of live orders of
// the sale.
func (rec *Reconciler) ordersOf(ctx context.Context, p catalogue.Product, ledger []stock.Entry, prev *passState) (map[idgen.ID]order.Order, int, error) {
	cols := []string{"id", "user_id", "buyer", "status", "shard"}
	if prev == nil {
		var rows []order.Order
		err := rec.db.WithContext(ctx).Select(cols).Where("product_id = ? AND sale = ?", p.ID, p.Sale).Find(&rows).Error
		if err != nil {
			return nil, 0, fmt.Errorf("reading the orders of product %d: %w", p.ID, err)
		}
		byID := make(map[idgen.ID]order.Order, len(rows))
		for _, o := range rows {
			byID[o.ID] = o
		}
		return byID, -1, nil
	}
	var liveCount int64
	err := rec.db.WithContext(ctx).Model(&order.Order{}).Where("product_id = ? AND sale = ? AND status IN ?", p.ID, p.Sale, order.LiveStatuses()).
		Count(&liveCount).Error
	if err != nil {
		return nil, 0, fmt.Errorf("counting the live orders of product %d: %w", p.ID, err)
	}
	var rows []order.Order
	err = rec.db.WithContext(ctx).Select(cols).Where("product_id = ? AND sale = ? AND status NOT IN ?", p.ID, p.Sale, order.LiveStatuses()).
		Find(&rows).Error
	if err != nil {
		return nil, 0, fmt.Errorf("reading the orders of product %d that are not live: %w", p.ID, err)
	}
	byID := make(map[idgen.ID]order.Order, len(rows))
	for _, o := range rows {
		byID[o.ID] = o
	}
	var ask []int64
	for _, e := range ledger {
		if _, ok := byID[e.Order]; !ok && prev.settled[e.User] != (take{e.Order, e.Shard}) {
			ask = append(ask, int64(e.Order))
		}
	}
	for len(ask) > 0 {
		chunk := ask[:min(idChunk, len(ask))]
		ask = ask[len(chunk):]
		rows = rows[:0]
		err := rec.db.WithContext(ctx).Select(cols).Where("id IN ? AND product_id = ? AND sale = ?", chunk, p.ID, p.Sale).
			Find(&rows).Error
		if err != nil {
			return nil, 0, fmt.Errorf("reading orders of product %d by id: %w", p.ID, err)
		}
		for _, o := range rows {
			byID[o.ID] = o
		}
	}
	return byID, int(liveCount), nil
}

// queueDepth is the mq mode's broker queue depth; without a broker, mq
// takes cannot be judged.
func (rec *Reconciler) queueDepth(ctx context.Context) (int, error) {
	if rec.opt.Broker == nil {
		return 0, errors.New("a take of the mq mode, and this process has no broker to read its queue (RABBITMQ_URL)")
	}
	return rec.opt.Broker.Depth(ctx)
}

// LastReconciliation returns the last pass recorded for a product, if any.
func (rec *Reconciler) LastReconciliation(ctx context.Context, id int64) (*Reconciliation, error) {
	b, err := rec.rdb.Get(ctx, reconciledKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the last reconciliation of product %d: %w", id, err)
	}
	var r Reconciliation
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("the last reconciliation of product %d: %w", id, err)
	}
	return &r, nil
}

// reconcileOnSchedule passes over the products this process sold in the
// last hour, and, at start, those reset in the last day, until Close.
func (rec *Reconciler) reconcileOnSchedule() {
	rec.touchRecent()
	t := time.NewTicker(rec.opt.Every)
	defer t.Stop()
	for {
		select {
		case <-rec.stop:
			return
		case <-t.C:
		}
		rec.touched.Range(func(k, v any) bool {
			id := k.(int64)
			if time.Since(v.(time.Time)) > time.Hour {
				rec.touched.Delete(id)
				rec.passes.Delete(id)
				return true
			}
			ctx, cancel := context.WithTimeout(context.Background(), rec.orders.Budget().Purchase())
			defer cancel()
			_, err := rec.pass(ctx, id, false)
			if err != nil && !errors.Is(err, ErrBusy) && !errors.Is(err, order.ErrClosing) && !errors.Is(err, order.ErrNotFound) {
				rec.log.Warn("a reconciliation pass failed", "product", id, "error", err)
			}
			select {
			case <-rec.stop:
				return false
			default:
				return true
			}
		})
	}
}

// touchRecent adds the products reset in the last day to those the
// reconciler passes over: after a restart, this process has sold nothing yet.
func (rec *Reconciler) touchRecent() {
	ctx, cancel := context.WithTimeout(context.Background(), rec.opt.Step)
	defer cancel()
	var ids []int64
	err := rec.db.WithContext(ctx).Model(&catalogue.Product{}).Where("store = ? AND updated_at > ?", stock.InRedis, time.Now().Add(-24*time.Hour)).
		Limit(1000).Pluck("id", &ids).Error
	if err != nil {
		rec.log.Warn("the reconciler does not know the recent products", "error", err)
		return
	}
	for _, id := range ids {
		rec.touched.LoadOrStore(id, time.Now())
	}
}

// forgetSettled drops from p's unsettled set the orders that are settled:
// their take is out of the ledger (given back, or never landed), or their
// order is written. It runs after a reconciler's pass.
func (rec *Reconciler) forgetSettled(ctx context.Context, p catalogue.Product) error {
	l := p.Stock().Layout
	marked, err := rec.stock.Ledgers().Unsettled(ctx, l)
	if err != nil || len(marked) == 0 {
		return err
	}
	ledger, err := rec.stock.Ledgers().Entries(ctx, l)
	if err != nil {
		return err
	}
	taken := make(map[idgen.ID]bool, len(ledger))
	for _, e := range ledger {
		taken[e.Order] = true
	}
	var settled, held []idgen.ID
	for id := range marked {
		if taken[id] {
			held = append(held, id)
		} else {
			settled = append(settled, id)
		}
	}
	if len(held) > 0 {
		var written []int64
		if err := rec.db.WithContext(ctx).Model(&order.Order{}).Where("id IN ? AND status IN ?", held, order.LiveStatuses()).
			Pluck("id", &written).Error; err != nil {
			return fmt.Errorf("reading the unsettled orders of product %d: %w", p.ID, err)
		}
		for _, id := range written {
			settled = append(settled, idgen.ID(id))
		}
	}
	return rec.stock.Ledgers().ForgetUnsettled(ctx, l, settled)
}
