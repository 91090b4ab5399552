package order

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"seckill/internal/catalogue"
	"seckill/internal/idgen"
	"seckill/internal/stock"
)

// newOrder is the order a take becomes.
func newOrder(p catalogue.Product, t stock.Ticket, shard int, rc *Receipt) Order {
	buyer, now := t.User, time.Now()
	return Order{
		ID: t.Order, ProductID: p.ID, Sale: p.Sale, Buyer: &buyer, UserID: t.User, Shard: shard,
		Lock: rc.Lock, Mode: rc.Mode, Status: Unpaid, Key: t.Key, AcceptedAt: &now, CreatedAt: now,
		DueAt: due(p, now),
	}
}

// due is when an order accepted at is cancelled if unpaid; nil without a
// payment window.
func due(p catalogue.Product, at time.Time) *time.Time {
	if p.PayTimeout <= 0 {
		return nil
	}
	d := at.Add(p.PayTimeout)
	return &d
}

// insertSQL writes an order only while the product's layout is epoch. A
// reset or a rebuild changes the epoch under a row lock that this statement
// shares, so once it has, no order taken from the old layout can land.
const insertSQL = "INSERT INTO orders (`id`, `product_id`, `sale`, `buyer`, `user_id`, `shard`, `lock`, `mode`, `status`, `idem_key`, `accepted_at`, `created_at`, `due_at`) " +
	"SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM products WHERE `id` = ? AND `epoch` = ?"

// insert writes o if the product's layout is still epoch; it returns the
// rows written, 0 when the layout changed.
func insert(ctx context.Context, db *gorm.DB, o Order, epoch int64) (int64, error) {
	res := db.WithContext(ctx).Exec(insertSQL, int64(o.ID), o.ProductID, o.Sale, o.Buyer, o.UserID, o.Shard,
		o.Lock, o.Mode, o.Status, o.Key, o.AcceptedAt, o.CreatedAt, o.DueAt, o.ProductID, epoch)
	return res.RowsAffected, res.Error
}

// record writes the order of a unit taken from Redis. When the write fails
// for certain, the unit goes back; when its outcome is unknown, a void row
// settles it.
func (s *Service) record(ctx context.Context, p catalogue.Product, req stock.Request, e stock.Entry, rc *Receipt) (Order, error) {
	rctx, cancel := context.WithTimeout(ctx, s.Budget().Record())
	defer cancel()
	o := newOrder(p, req.Ticket, e.Shard, rc)
	n, err := insert(rctx, s.db, o, p.Epoch)
	switch {
	case err == nil && n == 1:
		s.life.schedule(ctx, o)
		return o, nil
	case err == nil: // the layout changed after the take: its keys are gone
		s.returns.giveBack(ctx, req, e, "the product was laid out anew")
		return Order{}, errStale
	case errors.Is(err, gorm.ErrDuplicatedKey):
		return s.duplicate(ctx, p, req, e, o)
	case definite(s.db, err):
		s.returns.giveBack(ctx, req, e, err)
		return Order{}, fmt.Errorf("writing order %s: %w", o.ID, err)
	}
	// No answer: the INSERT may still commit.
	row, voided, err := s.unknown(rctx, o, "writing", err)
	if voided {
		s.returns.giveBack(ctx, req, e, err)
	}
	return row, err
}

// unknown settles o, whose write (doing) had no answer (err): the order, if
// it landed; else voided, nothing sold, the unit free to go back, and an
// error saying so. An error that is not voided leaves the outcome unknown.
func (s *Service) unknown(ctx context.Context, o Order, doing string, err error) (_ Order, voided bool, _ error) {
	row, live, serr := s.settle(ctx, o)
	switch {
	case serr != nil:
		return Order{}, false, &UnsettledError{Order: o.ID, Err: errors.Join(err, serr)}
	case live:
		s.life.schedule(ctx, row)
		return row, false, nil
	}
	return Order{}, true, fmt.Errorf("%s order %s (voided, nothing was sold): %w", doing, o.ID, err)
}

// duplicate handles an order that collided with a row: the same order,
// written by a concurrent attempt of the same purchase; a void row, written
// by the reconciler; or another order of the same buyer in this sale.
func (s *Service) duplicate(ctx context.Context, p catalogue.Product, req stock.Request, e stock.Entry, o Order) (Order, error) {
	row, found, err := find(ctx, s.db, o.ID)
	switch {
	case err != nil:
		return Order{}, &UnsettledError{Order: o.ID, Err: err}
	case found && row.UserID == o.UserID && row.ProductID == o.ProductID && row.Live():
		return row, nil
	case found && row.UserID == o.UserID && row.ProductID == o.ProductID:
		s.returns.giveBack(ctx, req, e, "the order was voided")
		return Order{}, fmt.Errorf("order %s was voided while it was being written; nothing was sold", o.ID)
	case found:
		// Another purchase's row: the ids' reservations went back (an
		// id_blocks restored from an older backup than the orders; see
		// idgen.Segments).
		s.returns.giveBack(ctx, req, e, "order id collision")
		return Order{}, fmt.Errorf("order id %s was issued twice; nothing was sold, try again", o.ID)
	}
	other, found, err := findBuyer(ctx, s.db, p.ID, p.Sale, o.UserID)
	if err != nil || !found {
		return Order{}, &UnsettledError{Order: o.ID, Err: cmp.Or(err, errors.New("a duplicate key, but neither the order nor the buyer's is there"))}
	}
	s.returns.giveBack(ctx, req, e, "the buyer has an order in this sale")
	return Order{}, &stock.TakenBefore{Prior: stock.Entry{User: other.UserID, Order: other.ID, Key: other.Key, Shard: other.Shard}}
}

// settle decides a write whose outcome is unknown: it inserts a void row
// with the order's id. If that lands, the order can never be written (the
// id is taken) and its unit can go back; if it collides, the row that holds
// the id is the answer. It reports that row and whether it is a live order.
func (s *Service) settle(ctx context.Context, o Order) (Order, bool, error) {
	v := o
	v.Buyer, v.Status = nil, Void
	err := s.db.WithContext(ctx).Create(&v).Error
	if err == nil {
		return v, false, nil
	}
	if !errors.Is(err, gorm.ErrDuplicatedKey) {
		return Order{}, false, fmt.Errorf("voiding order %s: %w", o.ID, err)
	}
	row, found, err := find(ctx, s.db, o.ID)
	if err != nil || !found {
		return Order{}, false, cmp.Or(err, fmt.Errorf("order %s collided but is not there", o.ID))
	}
	return row, row.Live(), nil
}

// Settle settles o's write whose outcome is unknown, as settle does: the
// row that holds o's id now, a void row or an order. The reconciler's way
// to decide a take whose order it did not find.
func (s *Service) Settle(ctx context.Context, o Order) (Order, error) {
	row, _, err := s.settle(ctx, o)
	return row, err
}

// definite reports whether a failed write to db surely did not commit: the
// server answered with an error. A timeout or a broken connection leaves
// the write's outcome unknown.
func definite(db *gorm.DB, err error) bool {
	if db.Dialector.Name() == "sqlite" {
		return true // in process: a statement that failed did not commit
	}
	// GORM translates some server errors into its own (TranslateError).
	for _, refused := range []error{gorm.ErrDuplicatedKey, gorm.ErrForeignKeyViolated, gorm.ErrCheckConstraintViolated} {
		if errors.Is(err, refused) {
			return true
		}
	}
	var me *mysql.MySQLError
	return errors.As(err, &me)
}

// find reads order id in db.
func find(ctx context.Context, db *gorm.DB, id idgen.ID) (Order, bool, error) {
	var o Order
	err := db.WithContext(ctx).Where("id = ?", int64(id)).Take(&o).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Order{}, false, nil
	}
	if err != nil {
		return Order{}, false, fmt.Errorf("reading order %s: %w", id, err)
	}
	return o, true, nil
}

// findBuyer returns a buyer's live order in a sale.
func findBuyer(ctx context.Context, db *gorm.DB, product, sale, user int64) (Order, bool, error) {
	var o Order
	err := db.WithContext(ctx).Where("product_id = ? AND sale = ? AND buyer = ?", product, sale, user).Take(&o).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Order{}, false, nil
	}
	if err != nil {
		return Order{}, false, fmt.Errorf("reading the order of user %d in sale %d of product %d: %w", user, sale, product, err)
	}
	return o, true, nil
}

// giveBack returns the unit of a take whose order will not be written, on a
// context of its own: the purchase's may be the very thing that ran out. If
// it fails, the take stays in the ledger and the reconciler returns it.
func (b returns) giveBack(ctx context.Context, req stock.Request, e stock.Entry, cause any) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.budget.GiveBack())
	defer cancel()
	req.Ticket = stock.Ticket{User: e.User, Order: e.Order, Key: e.Key}
	back, err := b.stock.GiveBack(ctx, req, stock.Taken{Entry: e})
	if err != nil {
		b.log.Error("a unit could not be given back; the reconciler will return it",
			"product", req.Product.ID, "shard", e.Shard, "order", e.Order, "cause", cause, "error", err)
		return err
	}
	if back {
		b.cat.Returned(ctx, req.Product.ID)
	}
	return nil
}
