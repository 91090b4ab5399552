package order

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"gorm.io/gorm"

	"seckill/internal/catalogue"
	"seckill/internal/idgen"
	"seckill/internal/lock"
	"seckill/internal/stock"
)

// An order's life after it is written: unpaid until its buyer pays (paid,
// sold for good) or cancels it, or its product's payment window ends
// (cancelled by the timeout); a cancelled order's unit goes back on sale,
// once, and its buyer may buy again. Each change is a conditional UPDATE
// (… WHERE status = 'unpaid'), so exactly one of pay, cancel and the timeout
// wins, and only the winner of a cancel returns the unit. The window's end
// is authoritative: a payment after it is refused.
//
// The timeouts come from a delay queue in Redis (stock's deadline sets:
// one sorted set per shard, claimed with a lease by whichever process polls
// it), not from keyspace notifications, which Redis sends at most once to
// whoever listens at that moment and only when it notices an expiry (lazily,
// or by sampling), nor from a periodic scan of the orders, which costs a
// query over every unpaid order per pass and fires up to a period late. A
// process that dies holding claimed deadlines loses nothing: they come due
// again when the lease ends. An order whose deadline never reached Redis
// (a crash between the INSERT and the scheduling) is found by the
// reconciler, which reads the due time from the order's row.

// Outcomes a caller branches on.
var (
	// ErrAlreadyPaid: the order was paid; it cannot be paid again nor
	// cancelled.
	ErrAlreadyPaid = errors.New("order: already paid")
	// ErrCancelled: the order was cancelled, by its buyer or its payment
	// window's end.
	ErrCancelled = errors.New("order: cancelled")
	// ErrQueued: the order is queued (the async mode), not written yet:
	// try again in a moment.
	ErrQueued = errors.New("order: queued, not written yet")
)

// naiveGap is the naive lifecycle's pause between its read of the status
// and its write: the time a real system spends in between (a call to the
// payment provider), which is the race window.
const naiveGap = 20 * time.Millisecond

// Pay marks an order paid, if b is its buyer (see Buyer.May), it is
// unpaid, and its payment window is open.
func (lc *Lifecycle) Pay(ctx context.Context, id idgen.ID, b Buyer) (Order, error) {
	o, p, err := lc.ownOrder(ctx, id, b)
	if err != nil {
		return Order{}, err
	}
	now := time.Now()
	if p.Lifecycle == catalogue.Naive {
		return lc.payNaively(ctx, o, now)
	}
	res := lc.db.WithContext(ctx).Model(&Order{}).
		Where("id = ? AND status = ? AND (due_at IS NULL OR due_at > ?)", int64(id), Unpaid, now).
		Updates(map[string]any{"status": Paid, "paid_at": now})
	if res.Error != nil {
		return Order{}, fmt.Errorf("paying order %s: %w", id, res.Error)
	}
	if res.RowsAffected == 1 {
		o.Status, o.PaidAt = Paid, &now
		return o, nil
	}
	return Order{}, lc.lost(ctx, id, "pay")
}

// Cancel cancels an unpaid order of b's, and puts its unit back on sale.
func (lc *Lifecycle) Cancel(ctx context.Context, id idgen.ID, b Buyer) (Order, error) {
	o, p, err := lc.ownOrder(ctx, id, b)
	if err != nil {
		return Order{}, err
	}
	won, err := lc.cancel(ctx, p, o, ByBuyer)
	if err != nil {
		return Order{}, err
	}
	if !won {
		return Order{}, lc.lost(ctx, id, "cancel")
	}
	o, _, err = find(ctx, lc.db, id)
	return o, err
}

// ownOrder reads an order of b's and its product; another buyer's order
// is not found, as an unknown one is, and a buyer not signed in touches
// only a lab product's orders (Buyer.May).
func (lc *Lifecycle) ownOrder(ctx context.Context, id idgen.ID, b Buyer) (Order, catalogue.Product, error) {
	o, p, err := lc.orderOf(ctx, id, b)
	switch {
	case err != nil:
		return Order{}, catalogue.Product{}, err
	case b.ID <= 0:
		return Order{}, catalogue.Product{}, fmt.Errorf("%w: user_id is required: the order's buyer", ErrInvalid)
	case o.UserID != b.ID:
		return Order{}, catalogue.Product{}, fmt.Errorf("%w: order %s of user %d", ErrNotFound, id, b.ID)
	case o.Status == Pending:
		return Order{}, catalogue.Product{}, fmt.Errorf("%w: order %s", ErrQueued, id)
	}
	return o, p, nil
}

// lost says why a change of an order did not happen: the state it lost to.
func (lc *Lifecycle) lost(ctx context.Context, id idgen.ID, what string) error {
	o, found, err := find(ctx, lc.db, id)
	switch {
	case err != nil:
		return err
	case !found:
		return fmt.Errorf("%w: order %s", ErrNotFound, id)
	case o.Status == Paid:
		return fmt.Errorf("%w: order %s was paid at %s", ErrAlreadyPaid, id, o.PaidAt.UTC().Format(time.RFC3339Nano))
	case o.Status == Cancelled:
		return fmt.Errorf("%w: order %s was cancelled by its %s", ErrCancelled, id, o.CancelledBy)
	case o.Status == Unpaid && o.DueAt != nil && !o.DueAt.After(time.Now()):
		// The window ended and the timeout has not come yet: it is cancelled now.
		if p, err := lc.cat.Product(ctx, o.ProductID); err == nil {
			if _, err := lc.cancel(ctx, p, o, ByTimeout); err != nil {
				lc.log.Warn("cancelling an order past its payment window", "order", id, "error", err)
			}
		}
		return fmt.Errorf("%w: order %s: its payment window ended at %s", ErrCancelled, id, o.DueAt.UTC().Format(time.RFC3339Nano))
	}
	return fmt.Errorf("order %s could not %s (status %s); try again", id, what, o.Status)
}

// cancel cancels o if it is still unpaid (and, by the timeout, past its
// window), and returns its unit to the store: in the same transaction for
// stock in SQL, after the commit for stock in Redis (if that fails, the
// take stays in the ledger without a live order, and the reconciler returns
// it). It reports whether this call won.
func (lc *Lifecycle) cancel(ctx context.Context, p catalogue.Product, o Order, by string) (bool, error) {
	if p.Lifecycle == catalogue.Naive {
		return lc.cancelNaively(ctx, p, o, by)
	}
	now := time.Now()
	ours := o.Sale == p.Sale // a unit of an earlier sale went with its stock
	if ours && p.Store == string(stock.InSQL) && (ModeOf(p).Locked || p.Lab) {
		// The sqlrmw mode writes the stock it read, minus one: a unit
		// returned between its SELECT and its UPDATE would be written over.
		// Return it under the shard's lock, as the purchases take theirs.
		defer lc.lockShard(ctx, p, o.Shard)()
	}
	err := lc.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		q := tx.Model(&Order{}).Where("id = ? AND status = ?", int64(o.ID), Unpaid)
		if by == ByTimeout {
			q = q.Where("due_at IS NOT NULL AND due_at <= ?", now)
		}
		res := q.Updates(map[string]any{"status": Cancelled, "buyer": nil, "cancelled_at": now, "cancelled_by": by})
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == 0 {
			return errLost
		}
		if ours && p.Store == string(stock.InSQL) {
			return tx.Model(&stock.Shard{}).Where("product_id = ? AND shard = ?", p.ID, o.Shard).
				Update("stock", gorm.Expr("stock + 1")).Error
		}
		return nil
	})
	if errors.Is(err, errLost) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cancelling order %s: %w", o.ID, err)
	}
	if ours {
		lc.returnUnit(ctx, p, o)
	}
	return true, nil
}

var errLost = errors.New("order: lost the race")

// lockShard takes a shard's lock under the product's strategy, waiting as
// long as a give-back would (a holder that keeps it longer is dead), and
// returns its release; without the lock, the release does nothing.
func (lc *Lifecycle) lockShard(ctx context.Context, p catalogue.Product, shard int) func() {
	locker, err := lc.cat.Locker(p.Lock)
	if err != nil {
		return func() {}
	}
	lease, err := locker.Acquire(ctx, p.Stock().LockKey(shard), lock.Options{TTL: lc.lockTTL, Wait: lc.budget.GiveBackWait()})
	if err != nil {
		lc.log.Warn("returning a unit without the shard's lock", "product", p.ID, "shard", shard, "error", err)
		return func() {}
	}
	return func() { lease.Release(context.WithoutCancel(ctx)) }
}

// returnUnit puts a cancelled order's unit back and forgets its buyer.
// A path token's retries end first: once the buyer's take is forgotten, a
// retry of the purchase would take anew, with the token it spent.
func (lc *Lifecycle) returnUnit(ctx context.Context, p catalogue.Product, o Order) {
	if p.Path && lc.paths != nil {
		if err := lc.paths.CloseRetries(ctx, o.UserID, p.ID, o.Key); err != nil {
			lc.log.WarnContext(ctx, "a cancelled order's path token still redeems for its key until it expires", "order", o.ID, "error", err)
		}
	}
	if p.Store == string(stock.InSQL) {
		lc.stock.Flags().Clear(p.ID)
		lc.cat.Returned(ctx, p.ID)
		return
	}
	var locker lock.Locker
	if ModeOf(p).Locked {
		locker, _ = lc.cat.Locker(p.Lock)
	}
	req := stock.Request{Product: p.Stock(), Taker: ModeOf(p).Taker(stock.Locked{Locker: locker,
		Lock: lock.Options{TTL: lc.lockTTL}, GiveBackWait: lc.budget.GiveBackWait()})}
	lc.returns.giveBack(ctx, req, stock.Entry{User: o.UserID, Order: o.ID, Key: o.Key, Shard: o.Shard}, "cancelled")
}

// payNaively is the check-then-act a lab product may choose: read the
// status, pause, write "paid" whatever it has become meanwhile.
func (lc *Lifecycle) payNaively(ctx context.Context, o Order, now time.Time) (Order, error) {
	cur, _, err := find(ctx, lc.db, o.ID)
	if err != nil {
		return Order{}, err
	}
	if cur.Status != Unpaid {
		return Order{}, lc.lost(ctx, o.ID, "pay")
	}
	if err := pauseFor(ctx, naiveGap); err != nil {
		return Order{}, err
	}
	err = lc.db.WithContext(ctx).Model(&Order{}).Where("id = ?", int64(o.ID)).
		Updates(map[string]any{"status": Paid, "paid_at": now}).Error
	if err != nil {
		return Order{}, fmt.Errorf("paying order %s: %w", o.ID, err)
	}
	o.Status, o.PaidAt = Paid, &now
	return o, nil
}

// cancelNaively: read the status, pause, write "cancelled" and return the
// unit, whatever the status has become meanwhile.
func (lc *Lifecycle) cancelNaively(ctx context.Context, p catalogue.Product, o Order, by string) (bool, error) {
	cur, _, err := find(ctx, lc.db, o.ID)
	if err != nil {
		return false, err
	}
	if cur.Status != Unpaid {
		return false, nil
	}
	if err := pauseFor(ctx, naiveGap); err != nil {
		return false, err
	}
	now := time.Now()
	err = lc.db.WithContext(ctx).Model(&Order{}).Where("id = ?", int64(o.ID)).
		Updates(map[string]any{"status": Cancelled, "buyer": nil, "cancelled_at": now, "cancelled_by": by}).Error
	if err != nil {
		return false, fmt.Errorf("cancelling order %s: %w", o.ID, err)
	}
	if o.Sale == p.Sale {
		if p.Store == string(stock.InSQL) {
			lc.db.WithContext(ctx).Model(&stock.Shard{}).Where("product_id = ? AND shard = ?", p.ID, o.Shard).
				Update("stock", gorm.Expr("stock + 1"))
		}
		lc.returnUnit(ctx, p, o)
	}
	return true, nil
}

func pauseFor(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// schedule adds the payment deadlines of orders just written. A failure
// is logged: the reconciler finds unpaid orders past their due time.
func (lc *Lifecycle) schedule(ctx context.Context, os ...Order) {
	var ds []stock.Deadline
	for _, o := range os {
		if o.DueAt != nil {
			ds = append(ds, stock.Deadline{Product: o.ProductID, Shard: o.Shard, Order: o.ID, Due: *o.DueAt})
		}
	}
	if err := lc.stock.Deadlines().Schedule(ctx, ds); err != nil {
		lc.log.Warn("payment deadlines not scheduled; the reconciler will find them", "orders", len(ds), "error", err)
	}
}

// expireOnSchedule polls the deadline sets every DueEvery until Close, and
// cancels the unpaid orders whose window has ended. Every dueSweepEvery it
// also closes the empty sets, so that the registry the passes read keeps
// only the sets of shards with deadlines.
func (lc *Lifecycle) expireOnSchedule() {
	t := time.NewTicker(lc.dueEvery)
	defer t.Stop()
	var swept time.Time
	for {
		select {
		case <-lc.flight.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), lc.budget.Purchase())
		if err := lc.ExpireDue(ctx); err != nil && !errors.Is(err, ErrClosing) {
			lc.log.Warn("a pass over the payment deadlines failed", "error", err)
		}
		if time.Since(swept) >= dueSweepEvery {
			swept = time.Now()
			if _, err := lc.stock.Deadlines().ForgetIdleDueSets(ctx); err != nil {
				lc.log.Warn("the empty deadline sets were not all closed", "error", err)
			}
		}
		cancel()
	}
}

// dueSweepEvery is how often a process closes the empty deadline sets: a
// sweep is a script per registered set, which the passes every DueEvery
// need not pay; a set closed a second late costs a pass one claim.
const dueSweepEvery = time.Second

// ExpireDue claims the deadlines that are due, in every set, and cancels
// their orders if they are still unpaid.
func (lc *Lifecycle) ExpireDue(ctx context.Context) error {
	if err := lc.flight.enter(); err != nil {
		return err
	}
	defer lc.flight.working.Done()
	keys, err := lc.stock.Deadlines().DueSets(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, key := range keys {
		ids, err := lc.stock.Deadlines().ClaimDue(ctx, key, time.Now(), lc.dueLease, 100)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		done, err := lc.expireAll(ctx, ids)
		errs = append(errs, err, lc.stock.Deadlines().Unschedule(ctx, key, done...))
	}
	return errors.Join(errs...)
}

// expireConcurrency bounds the cancels a pass runs at once: one at a time,
// a pass over many orders due together would end their windows late.
const expireConcurrency = 16

// expireAll cancels the orders of claimed deadlines and returns those
// settled; the others stay claimed and come due again after the lease.
func (lc *Lifecycle) expireAll(ctx context.Context, ids []idgen.ID) ([]idgen.ID, error) {
	var (
		mu   sync.Mutex
		done []idgen.ID
		errs []error
		wg   sync.WaitGroup
	)
	slots := make(chan struct{}, expireConcurrency)
	for _, id := range ids {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			err := lc.expire(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			done = append(done, id)
		})
	}
	wg.Wait()
	return done, errors.Join(errs...)
}

// expire cancels an order whose window has ended, if it is still unpaid.
func (lc *Lifecycle) expire(ctx context.Context, id idgen.ID) error {
	o, found, err := find(ctx, lc.db, id)
	if err != nil || !found || o.Status != Unpaid {
		return err // paid, cancelled, or never written (the reconciler's)
	}
	p, err := lc.cat.Product(ctx, o.ProductID)
	if err != nil {
		return err
	}
	won, err := lc.cancel(ctx, p, o, ByTimeout)
	if err == nil && !won && o.DueAt != nil && o.DueAt.After(time.Now()) {
		// Claimed before its row's due time (a clock between processes):
		// due again at the right time.
		lc.schedule(ctx, o)
	}
	return err
}

// expireOverdue cancels a sale's unpaid orders well past their due time:
// those whose deadline never reached the delay queue.
func (lc *Lifecycle) expireOverdue(ctx context.Context, p catalogue.Product) (int, error) {
	var ids []int64
	err := lc.db.WithContext(ctx).Model(&Order{}).
		Where("product_id = ? AND sale = ? AND status = ? AND due_at < ?", p.ID, p.Sale, Unpaid, time.Now().Add(-2*lc.dueLease)).
		Limit(1000).Pluck("id", &ids).Error
	if err != nil {
		return 0, fmt.Errorf("reading the overdue orders of product %d: %w", p.ID, err)
	}
	n := 0
	for _, id := range ids {
		if err := lc.expire(ctx, idgen.ID(id)); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
