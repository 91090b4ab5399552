package order

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"seckill/internal/catalogue"
	"seckill/internal/stock"
)

// inSQL is how the modes whose stock is in SQL (db, sqlrmw) sell: the take
// (their taker's UPDATE of a shard row) and the order's INSERT in one
// transaction, so that they commit together or not at all. Only the
// COMMIT's own failure can leave the outcome unknown; a void row settles
// it.
type inSQL struct{}

func (q inSQL) sell(ctx context.Context, s *Service, sl sale, rc *Receipt) (Order, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Budget().Take()+s.Budget().Record())
	defer cancel()
	for try := 1; ; try++ {
		o, err := q.inTx(ctx, s, sl, rc)
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != mysqlDeadlock || try == maxDeadlocks {
			return o, err
		}
	}
}

// A transaction that scans shards for stock can deadlock with another near
// the sell-out, when each waited for a row the other had just emptied;
// InnoDB then rolls one back (it took nothing) and it is run again.
const (
	mysqlDeadlock = 1213
	maxDeadlocks  = 5
)

func (q inSQL) inTx(ctx context.Context, s *Service, sl sale, rc *Receipt) (Order, error) {
	p, req := sl.p, sl.req
	// READ COMMITTED, so that a shard found empty is not kept locked while
	// the purchase falls back to the next: under REPEATABLE READ the
	// scans' row locks cross and deadlock. The fence against a reset is the
	// shard row's lock: a reset rewrites the rows first (see Reset).
	var opts []*sql.TxOptions
	if s.db.Dialector.Name() == "mysql" {
		opts = append(opts, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	}
	tx := s.db.WithContext(ctx).Begin(opts...)
	if tx.Error != nil {
		return Order{}, fmt.Errorf("beginning the purchase's transaction: %w", tx.Error)
	}
	req.Taker = sl.mode.taker(sl.locked, tx)
	var held *stock.Held // sqlrmw's lock, held until the COMMIT
	o, err := func() (Order, error) {
		taken, err := s.stock.Take(ctx, req)
		rc.LockWait += taken.LockWait
		if err != nil {
			return Order{}, err
		}
		held = taken.Held
		o := newOrder(p, req.Ticket, taken.Shard, rc)
		n, err := insert(ctx, tx, o, p.Epoch)
		if err == nil && n == 0 {
			err = errStale
		}
		return o, err
	}()
	if err != nil {
		tx.Rollback()
		q.release(ctx, s, held, rc)
		if errors.Is(err, gorm.ErrDuplicatedKey) {
			return q.duplicate(ctx, s, p, req, rc)
		}
		return Order{}, err
	}
	if req.Hooks != nil { // the closure is made for the lab's purchases only
		if err := req.Hooks.BeforeCommit(ctx, func() { q.release(ctx, s, held, rc) }); err != nil {
			tx.Rollback()
			q.release(ctx, s, held, rc) // nothing, if the hook released it already
			return Order{}, fmt.Errorf("holding before the commit: %w", err)
		}
	}
	err = commit(tx, req.Hooks)
	q.release(ctx, s, held, rc)
	if err == nil {
		s.life.schedule(ctx, o)
		return o, nil
	}
	if definite(s.db, err) {
		return Order{}, fmt.Errorf("committing order %s: %w", o.ID, err)
	}
	// The stock's decrement was in the transaction with the order: if the
	// order did not land, neither did it, and there is no unit to give back.
	row, _, err := s.unknown(ctx, o, "committing", err)
	return row, err
}

// duplicate handles an order that collided: the buyer has an
// order in this sale (the same purchase retried, or another), or the id
// was issued twice. The transaction rolled back: nothing was taken.
func (inSQL) duplicate(ctx context.Context, s *Service, p catalogue.Product, req stock.Request, rc *Receipt) (Order, error) {
	other, found, err := findBuyer(ctx, s.db, p.ID, p.Sale, req.Ticket.User)
	switch {
	case err != nil:
		return Order{}, err
	case !found:
		return Order{}, fmt.Errorf("order id %s was issued twice; nothing was sold, try again", req.Ticket.Order)
	}
	rc.Order = other.ID
	if other.Key == req.Ticket.Key {
		rc.Replayed = true
		return other, nil
	}
	return Order{}, &stock.TakenBefore{Prior: stock.Entry{User: other.UserID, Order: other.ID, Key: other.Key, Shard: other.Shard}}
}

// commit sends tx's COMMIT and notes the moment in the purchase's hooks
// (the trace's CommitUS) as it does, so that a trace tells a lock released
// before the COMMIT from one released after it by the order of the two.
func commit(tx *gorm.DB, h *stock.Hooks) error {
	h.SendingCommit()
	return tx.Commit().Error
}

// release gives up the sqlrmw mode's lock after the COMMIT (or, under the
// lab's fault, before it). The sale does not hang on it: a release that
// fails leaves the lock to expire, as rmw's does.
func (inSQL) release(ctx context.Context, s *Service, held *stock.Held, rc *Receipt) {
	lost, err := held.Release(ctx)
	rc.LeaseLost = rc.LeaseLost || lost
	if err != nil {
		s.log.Warn("the lock was not released after the commit; it will expire", "error", err)
	}
}
