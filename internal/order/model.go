// Package order sells units of stock: it keeps products and orders in SQL
// through GORM, and for each purchase takes a unit from the stock store,
// draws an order id from Redis and writes the order, giving the unit back
// when the write fails, so that a unit is always either in the store or in
// an order, never both and never neither.
package order

import (
	"time"

	"seckill/internal/idgen"
	"seckill/internal/stock"
)

// Product is a thing on sale and the defaults its purchases use.
type Product struct {
	ID       int64  `gorm:"primaryKey;autoIncrement:false"`
	Name     string `gorm:"size:200;not null"`
	Initial  int    `gorm:"not null"`
	Shards   int    `gorm:"not null"`
	Lock     string `gorm:"size:32;not null"`
	Mode     string `gorm:"size:8;not null"`
	Fallback bool   `gorm:"not null"`
	// Store is where the stock lives, fixed by Mode when it was laid out.
	Store     string `gorm:"size:8;not null"`
	UpdatedAt time.Time
}

func (p Product) stock() stock.Product {
	return stock.Product{ID: p.ID, Shards: p.Shards, Where: stock.Where(p.Store), Fallback: p.Fallback}
}

// Order is one unit sold to one user. The unique index on (product, user)
// is the last word on "one per user": whatever the mode, a second order for
// the same pair fails to insert and its unit goes back. The product comes
// first in it so that it also serves counting a product's orders.
type Order struct {
	ID        idgen.ID  `gorm:"primaryKey;autoIncrement:false" json:"id"`
	ProductID int64     `gorm:"not null;uniqueIndex:idx_product_user,priority:1" json:"product_id"`
	UserID    int64     `gorm:"not null;uniqueIndex:idx_product_user,priority:2" json:"user_id"`
	Shard     int       `gorm:"not null" json:"shard"`
	Lock      string    `gorm:"size:32;not null" json:"lock"`
	Mode      string    `gorm:"size:8;not null" json:"mode"`
	CreatedAt time.Time `json:"created_at"`
}
