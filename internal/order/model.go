// Package order sells units of stock. It keeps products and orders in SQL
// through GORM; for each purchase it draws an order id, takes a unit from the
// stock store and writes the order, so that a unit is always in the store or
// in an order, never both and never neither, whatever fails in between:
//
//   - a take is recorded in the stock's ledger in the same atomic step, and
//     is idempotent per buyer, so a retried purchase finds its first take;
//   - an order is written only while the layout it was taken from is current
//     (a conditional INSERT), so a reset or a rebuild fences late writers;
//   - a write whose outcome is unknown is never undone on a guess: a void row
//     with the order's id settles it, and the reconciler returns the units
//     of takes that never became orders.
//
// docs/INVARIANT.md tells the whole story; this package is its code.
package order

import (
	"slices"
	"time"

	"seckill/internal/idgen"
)

// Statuses of an order.
const (
	// Unpaid is an order written and not paid (paying is not built yet).
	Unpaid = "unpaid"
	// Void is a row that holds an order id so that the order can never be
	// written: it settles a write whose outcome was unknown, and its unit
	// went back to the store. It is not an order.
	Void = "void"
	// Pending is an order of the async mode that is queued and not written
	// yet. It has no row: only the API says it.
	Pending = "pending"
	// Failed is a queued order the database refused: it went to the dead
	// letters, its unit back to the store. It has no row either.
	Failed = "failed"
	// Paid is an order its buyer paid: sold for good.
	Paid = "paid"
	// Cancelled is an order cancelled by its buyer or by the payment
	// window's end; its unit went back on sale, and its buyer may buy again.
	Cancelled = "cancelled"
)

// live are the statuses of an order that holds a unit.
var live = []string{Unpaid, Paid}

// LiveStatuses are the statuses of an order that holds a unit (Live).
func LiveStatuses() []string { return slices.Clone(live) }

// Who cancelled an order.
const (
	ByBuyer   = "buyer"
	ByTimeout = "timeout"
)

// Order is one unit sold to one user in one sale. The unique index on
// (product, sale, buyer) is the last word on "one per buyer": whatever the
// mode, a second live order for the same buyer in the same sale fails to
// insert. Buyer is the user for a live order and NULL for a void row, which
// a unique index does not compare.
type Order struct {
	ID        idgen.ID `gorm:"primaryKey;autoIncrement:false"`
	ProductID int64    `gorm:"not null;uniqueIndex:idx_sale_buyer,priority:1"`
	Sale      int64    `gorm:"not null;uniqueIndex:idx_sale_buyer,priority:2"`
	Buyer     *int64   `gorm:"uniqueIndex:idx_sale_buyer,priority:3"`
	UserID    int64    `gorm:"not null"`
	Shard     int      `gorm:"not null"`
	Lock      string   `gorm:"size:32;not null"`
	Mode      string   `gorm:"size:8;not null"`
	Status    string   `gorm:"size:12;not null;default:unpaid"`
	Key       string   `gorm:"column:idem_key;size:64;not null;default:''"`
	// AcceptedAt is when the purchase was answered: CreatedAt for the
	// synchronous modes, earlier for a queued order (its 202). NULL in
	// rows written before it existed.
	AcceptedAt *time.Time
	CreatedAt  time.Time `gorm:"not null"`
	// DueAt is when an unpaid order is cancelled, if its product has a
	// payment window.
	DueAt       *time.Time
	PaidAt      *time.Time
	CancelledAt *time.Time
	CancelledBy string `gorm:"size:8;not null;default:''"`
	// Reason says why an order failed; not stored.
	Reason string `gorm:"-"`
}

// Live reports whether the order holds a unit: unpaid or paid, not void
// nor cancelled.
func (o Order) Live() bool { return o.Status == Unpaid || o.Status == Paid }
