package api

import "time"

// ProductRequest is the body of POST /api/products. An absent field takes
// its default; ID and Stock are required.
type ProductRequest struct {
	ID    *int64 `json:"id"`
	Name  string `json:"name,omitempty"`
	Stock *int   `json:"stock"`
	// Shards is 1–MaxShards. Default: DefaultShards.
	Shards   *int   `json:"shards,omitempty"`
	Lock     string `json:"lock,omitempty"` // default DefaultLock
	Mode     string `json:"mode,omitempty"` // default DefaultMode
	Fallback *bool  `json:"fallback,omitempty"`
}

// ProductView is a product with its stock, the answer of GET
// /api/products/:id and POST /api/products.
type ProductView struct {
	ID       int64       `json:"id"`
	Name     string      `json:"name"`
	Initial  int         `json:"initial"`
	Stock    int         `json:"stock"`
	Shards   []ShardView `json:"shards"`
	Sold     int         `json:"sold"`
	SoldOut  bool        `json:"sold_out"`
	Lock     string      `json:"lock"`
	Mode     string      `json:"mode"`
	Fallback bool        `json:"fallback"`
	Store    string      `json:"store"` // "redis" or "sql"
}

// ShardView is one shard's stock and where it is kept.
type ShardView struct {
	Key   string `json:"key"`
	Stock int    `json:"stock"`
}

// Verdicts of an Audit.
const (
	VerdictOK           = "OK"
	VerdictOversold     = "OVERSOLD"
	VerdictInconsistent = "INCONSISTENT"
)

// Audit is GET /api/products/:id/audit: the orders in the database against
// the stock left in the store.
type Audit struct {
	ProductID int64 `json:"product_id"`
	Initial   int   `json:"initial"`
	Remaining int   `json:"remaining"`
	Orders    int   `json:"orders"`
	// Oversold is max(0, Orders − Initial).
	Oversold int `json:"oversold"`
	// LostUpdates is Orders − (Initial − Remaining).
	LostUpdates int    `json:"lost_updates"`
	Verdict     string `json:"verdict"`
}

// OrderRequest is the body of POST /api/orders. UserID and ProductID are
// required; the rest are per-request options, absent by default.
type OrderRequest struct {
	UserID    *int64 `json:"user_id,omitempty"`
	ProductID *int64 `json:"product_id,omitempty"`
	Lock      string `json:"lock,omitempty"`
	Mode      string `json:"mode,omitempty"`
	HoldMS    int64  `json:"hold_ms,omitempty"`
	// The lock ladder's faults.
	Abandon           bool  `json:"abandon,omitempty"`
	CrashBeforeExpire bool  `json:"crash_before_expire,omitempty"`
	ClockSkewMS       int64 `json:"clock_skew_ms,omitempty"`
}

// Order is an order, the answer of POST /api/orders and GET
// /api/orders/:id. Its id is a decimal string: ids exceed 2^53, past which a
// JavaScript number loses integers.
type Order struct {
	ID        string    `json:"id"`
	ProductID int64     `json:"product_id"`
	UserID    int64     `json:"user_id"`
	Shard     int       `json:"shard"`
	Lock      string    `json:"lock"`
	Mode      string    `json:"mode"`
	CreatedAt time.Time `json:"created_at"`
}

// Health is GET /healthz when Redis and the database answer.
type Health struct {
	Status string `json:"status"` // "ok"
	Mode   string `json:"mode"`   // "embedded" or "external"
	Redis  string `json:"redis"`  // server version
	SQL    string `json:"sql"`    // dialect and version
}

// LockInfo is one rung of the lock ladder, GET /api/locks.
type LockInfo struct {
	Name     string   `json:"name"`
	Summary  string   `json:"summary"`
	Fixes    string   `json:"fixes"`
	Breaks   string   `json:"breaks"`
	Commands []string `json:"commands"`
	Test     string   `json:"test"`
}
