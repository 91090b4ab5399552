package stock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"seckill/internal/lock"
)

// SQLRMW is the sqlrmw mode's take: under the shard's lock, in the order's
// transaction, SELECT the shard's stock, then UPDATE it to the value
// read minus one. The UPDATE's value is absolute, as rmw's SET is: only the
// lock stands between two holders that read the same value (on a guarded
// request the UPDATE also requires the value read), and it must be
// held until the COMMIT, for a plain SELECT reads the last committed value
// whatever another transaction has written and not committed. So on a take
// the lock stays held: Taken.Held, which the caller releases after its
// COMMIT. An empty shard's lock is released here.
type SQLRMW struct {
	// Tx is the order's transaction.
	Tx *gorm.DB
	Locked
}

var _ Taker = SQLRMW{}

// Where is SQL.
func (SQLRMW) Where() Where { return InSQL }

// writeLock is none: a unit in SQL goes back with the transaction's
// rollback, and nothing else writes a shard's row.
func (SQLRMW) writeLock() *Locked { return nil }

func (m SQLRMW) takeShard(ctx context.Context, s *Store, r Request, t *Taken) (taken bool, err error) {
	if m.Tx == nil {
		return false, errors.New("stock: the sqlrmw mode takes in the order's transaction, and none was given")
	}
	p := r.Product
	lease, err := s.acquire(ctx, r, m.Locked, t)
	if err != nil {
		return false, err
	}
	h := &Held{lease: lease, hooks: r.Hooks, shard: t.Shard, product: p.ID}
	if r.Hooks.keepLock() {
		lock.Abandon(lease)
		h.lease = nil
	}
	defer func() {
		r.Hooks.done(taken, err)
		if taken {
			t.Held = h
			return
		}
		if lost, rerr := h.Release(ctx); err == nil {
			t.LeaseLost, err = lost, rerr
		}
	}()
	t.Token = lease.Token()
	var n int
	row := m.Tx.WithContext(ctx).Raw("SELECT stock FROM product_shards WHERE product_id = ? AND shard = ?", p.ID, t.Shard).Row()
	if err := row.Scan(&n); err != nil {
		return false, fmt.Errorf("reading SQL shard %d of product %d: %w", t.Shard, p.ID, err)
	}
	r.Hooks.read(n)
	if n <= 0 {
		return false, nil
	}
	if err := r.Hooks.inside(ctx); err != nil {
		return false, err
	}
	r.Hooks.write(n - 1)
	// A guarded write is conditional on the value read: a holder paused
	// past its lease finds another holder's write there and writes
	// nothing. The UPDATE's WHERE reads the latest committed row, not the
	// SELECT's snapshot, and waits for a writer that has not committed.
	// Lab products keep the unconditional write, the lesson of
	// release_before_commit and of a lock that excludes nobody.
	update, args := "UPDATE product_shards SET stock = ? WHERE product_id = ? AND shard = ?", []any{n - 1, p.ID, t.Shard}
	if p.Guarded {
		update, args = update+" AND stock = ?", append(args, n)
	}
	res := m.Tx.WithContext(ctx).Exec(update, args...)
	if res.Error != nil {
		return false, fmt.Errorf("writing SQL shard %d of product %d: %w", t.Shard, p.ID, res.Error)
	}
	if p.Guarded && res.RowsAffected == 0 {
		return false, fmt.Errorf("%w: SQL shard %d of product %d: another holder wrote its stock after this purchase read %d", ErrLeaseLost, t.Shard, p.ID, n)
	}
	return true, nil
}

// Held is a lock the sqlrmw mode's take leaves held, for its caller to
// release after the transaction's COMMIT: released before it, the next
// holder reads the old value. A nil *Held holds nothing.
type Held struct {
	lease   lock.Lease // nil once released, or abandoned
	hooks   *Hooks
	shard   int
	product int64
}

// Release gives the lock up, once; later calls do nothing. It reports
// whether the lock was no longer this holder's (its lease expired).
func (h *Held) Release(ctx context.Context) (lost bool, err error) {
	if h == nil || h.lease == nil {
		return false, nil
	}
	lease := h.lease
	h.lease = nil
	h.hooks.releasing()
	// A release must not fail with the purchase's context: it may be the
	// COMMIT's deadline that ran out.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	err = lease.Release(ctx)
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, lock.ErrNotHeld):
		h.hooks.leaseLost()
		return true, nil
	}
	return false, fmt.Errorf("releasing the lock of SQL shard %d of product %d: %w", h.shard, h.product, err)
}

// releaseTimeout bounds a Held's release.
const releaseTimeout = 5 * time.Second
