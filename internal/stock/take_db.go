package stock

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"
)

// DB takes in SQL: a conditional UPDATE of the shard's row (stock > 0) in
// the order's transaction, so that the take and the order commit or roll
// back together; no lock but the row's.
type DB struct {
	// Tx is the order's transaction.
	Tx *gorm.DB
}

var _ Taker = DB{}

// Where is SQL.
func (DB) Where() Where { return InSQL }

func (DB) writeLock() *Locked { return nil }

func (d DB) takeShard(_ context.Context, _ *Store, r Request, t *Taken) (bool, error) {
	if d.Tx == nil {
		return false, errors.New("stock: the db mode takes in the order's transaction, and none was given")
	}
	p := r.Product
	r.Hooks.sent(t.Shard)
	res := d.Tx.Model(&Shard{}).
		Where("product_id = ? AND shard = ? AND stock > 0", p.ID, t.Shard).
		Update("stock", gorm.Expr("stock - 1"))
	r.Hooks.done(res.RowsAffected == 1, res.Error)
	if res.Error != nil {
		return false, fmt.Errorf("taking from SQL shard %d of product %d: %w", t.Shard, p.ID, res.Error)
	}
	return res.RowsAffected == 1, nil
}
