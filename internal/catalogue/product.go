// Package catalogue keeps the products on sale: their specs in SQL, their
// stock laid out in the stock store, a cache of them in every process kept
// fresh by the other processes' notices, resets that start a new sale, and
// rebuilds that lay a sale's stock out again from its orders after Redis
// lost it. It sells nothing: package order does, and asks it for products.
package catalogue

import (
	"errors"
	"time"

	"seckill/internal/stock"
)

// Outcomes a caller branches on. Package order shares ErrInvalid and
// ErrNotFound, so that one test of an error covers both packages.
var (
	// ErrInvalid wraps every error caused by the request's content.
	ErrInvalid  = errors.New("invalid request")
	ErrNotFound = errors.New("not found")
	// ErrExists: CreateIfAbsent found the product in the database or in Redis.
	ErrExists = errors.New("catalogue: product exists")
	// ErrResetRequired: a POST of an existing product that is not a lab
	// product changed its lock or mode without the operator's explicit reset.
	ErrResetRequired = errors.New("catalogue: changing how a product is sold needs an explicit reset")
	// ErrNotDurable: a product that is not a lab product asked for a mode
	// whose answer rests on Redis (async, mq) on a Redis that keeps nothing.
	ErrNotDurable = errors.New("catalogue: Redis keeps nothing across a restart")
)

// Limits on what a product may ask for.
const (
	MaxStock      = 10_000_000
	MinPayTimeout = time.Second
	MaxPayTimeout = 24 * time.Hour
)

// Lifecycles of a product's orders.
const (
	Conditional = "conditional"
	Naive       = "naive"
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
	Store string `gorm:"size:8;not null"`
	// Lab products accept the teaching knobs per purchase (another lock or
	// mode, a hold, faults); others are sold only as they were created.
	// Fixed when the product is created.
	Lab bool `gorm:"not null;default:false"`
	// Sale counts the product's sales: a reset starts a new one, and every
	// order belongs to the sale it was made in.
	Sale int64 `gorm:"not null;default:1"`
	// Epoch counts the layouts of the product's stock in Redis: a reset or
	// a rebuild lays it out anew under new keys (see stock.Layout).
	Epoch int64 `gorm:"not null;default:1"`
	// PayTimeout is how long a buyer has to pay an order before it is
	// cancelled and its unit goes back on sale; 0: no window, orders stay
	// unpaid until paid or cancelled.
	PayTimeout time.Duration `gorm:"not null;default:0"`
	// Lifecycle is how pay, cancel and the timeout change an order:
	// Conditional (the default), or Naive, the check-then-act a lab
	// product may choose to show the race it loses.
	Lifecycle string `gorm:"size:12;not null;default:conditional"`
	// Replicated products answer a purchase once its take in Redis is on
	// a replica as well (stock.Product.Replicated).
	Replicated bool `gorm:"not null;default:false"`
	// Path products sell only to a purchase carrying a one-time path token
	// issued to its buyer (admission.Paths); Captcha ones issue it only
	// for a solved captcha.
	Path    bool `gorm:"not null;default:false"`
	Captcha bool `gorm:"not null;default:false"`
	// Reservation products sell at their opening only to buyers who
	// reserved before it (package order: a reservation is the product's,
	// kept across resets, so that the operator may size the sale from the
	// count and start it again). It needs a StartsAt, when reserving ends.
	Reservation bool `gorm:"not null;default:false"`
	// RebuiltAt is when the current sale's stock was last laid out anew
	// from its orders after Redis lost it; nil if never (a reset clears it).
	RebuiltAt *time.Time
	// StartsAt and EndsAt are the sale window: purchases before StartsAt
	// or from EndsAt on are refused (package order); nil is no bound.
	// Paying and cancelling ignore them. UTC, to the millisecond.
	StartsAt *time.Time
	EndsAt   *time.Time
	// AccountsBefore: the product sells only to buyers whose account was
	// made before it (package order); nil sells to every account.
	AccountsBefore *time.Time
	UpdatedAt      time.Time
}

// Stock is the product as the stock store knows it.
func (p Product) Stock() stock.Product {
	return stock.Product{
		Layout: stock.Layout{ID: p.ID, Shards: p.Shards, Epoch: p.Epoch},
		Where:  stock.Where(p.Store), Fallback: p.Fallback, Sale: p.Sale, PayTimeout: p.PayTimeout,
		Replicated: p.Replicated,
		Guarded:    !p.Lab, // a lab product shows what a lease alone allows
	}
}

// ProductSpec describes a product to create or reset.
type ProductSpec struct {
	ID       int64
	Name     string
	Stock    int
	Shards   int    // default api.DefaultShards
	Lock     string // default api.DefaultLock
	Mode     string // default api.DefaultMode
	Fallback *bool  // default true
	Lab      bool   // fixed when the product is created
	// PayTimeout is the payment window: MinPayTimeout–MaxPayTimeout, or 0
	// for none (the default).
	PayTimeout time.Duration
	// Lifecycle is Conditional (the default) or, on a lab product, Naive.
	Lifecycle string
	// Replicated answers a purchase once its take is on a replica too.
	Replicated bool
	// Path asks every purchase for a path token; Captcha (with Path) gives
	// the token only for a solved captcha.
	Path, Captcha bool
	// Reservation sells only to buyers who reserved before StartsAt
	// (Product.Reservation); it needs StartsAt.
	Reservation bool
	// StartsAt and EndsAt are the sale window (Product.StartsAt): each
	// optional (nil, the default, is no bound), EndsAt after StartsAt.
	// Unlike the lock and mode, a POST may change them without Reset: a
	// window decides when the new sale sells, not whether it sells safely.
	StartsAt, EndsAt *time.Time
	// AccountsBefore (Product.AccountsBefore): nil, the default, sells to
	// every account; like the window, a POST may change it without Reset.
	AccountsBefore *time.Time
	// Reset is the operator's explicit reset: only it may change the lock
	// or the mode of an existing product that is not a lab product.
	Reset bool
}
