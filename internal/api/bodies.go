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
	// Lab products take the per-request lock, mode, hold and faults; others
	// refuse them (403 lab_only). Fixed when the product is created.
	Lab bool `json:"lab,omitempty"`
	// PayTimeoutMS is the payment window: an order unpaid this long after
	// its purchase is cancelled and its unit goes back on sale. 0 (the
	// default) is none; else 1,000–86,400,000.
	PayTimeoutMS int64 `json:"pay_timeout_ms,omitempty"`
	// Lifecycle is "conditional" (the default): pay, cancel and the
	// timeout are conditional updates, and exactly one wins; or, on a lab
	// product, "naive": read the status, then write, which loses the race.
	Lifecycle string `json:"lifecycle,omitempty"`
	// Replicated: a purchase is answered once its take is on a replica of
	// Redis as well (WAIT 1); when none acknowledges it in time, 503
	// outcome_unknown with the order id. Default: false.
	Replicated bool `json:"replicated,omitempty"`
	// Path: a purchase must carry a one-time path token (path_token),
	// issued to its signed-in buyer by POST /api/products/:id/path from the
	// opening second; without one, 403 path_required. Default: false.
	Path bool `json:"path,omitempty"`
	// Captcha (with Path): the path token is issued only for a solved
	// captcha (POST /api/captcha). Default: false.
	Captcha bool `json:"captcha,omitempty"`
	// Reservation: the sale sells only to buyers who reserved before
	// StartsAt (POST /api/products/:id/reservation); any other purchase is
	// 403 not_reserved. Needs starts_at. Reservations are the product's:
	// a reset (to size the sale from their count) keeps them. Default:
	// false.
	Reservation bool `json:"reservation,omitempty"`
	// StartsAt and EndsAt are the sale window, RFC 3339: purchases before
	// StartsAt are 409 not_started, from EndsAt on 409 sale_ended. Each is
	// optional (absent: no bound); EndsAt must be after StartsAt. Absent,
	// a reset clears them.
	StartsAt *time.Time `json:"starts_at,omitempty"`
	EndsAt   *time.Time `json:"ends_at,omitempty"`
	// AccountsBefore, RFC 3339: the product sells only to buyers whose
	// account was made before it (403 account_too_new), so that accounts
	// made for the sale once it is announced do not buy. Absent: every
	// account. Set when the product is created or reset.
	AccountsBefore *time.Time `json:"accounts_before,omitempty"`
	// Reset is the operator's explicit reset: a new sale, under the lock
	// and mode given, of a product that is not a lab product. Without it, a
	// POST of such an existing product is 409 reset_required.
	Reset bool `json:"reset,omitempty"`
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
	Lab      bool        `json:"lab"`
	// Sale counts the product's sales: each reset starts one.
	Sale         int64  `json:"sale"`
	PayTimeoutMS int64  `json:"pay_timeout_ms"`
	Lifecycle    string `json:"lifecycle"`
	Replicated   bool   `json:"replicated"`
	Path         bool   `json:"path"`
	Captcha      bool   `json:"captcha"`
	// Durability is what Redis keeps of a write it answered when its
	// process dies, so what a 202 survives: DurabilityNone,
	// DurabilityEverysec or DurabilityAlways; DurabilityReason names the
	// setting that decided it.
	Durability       string `json:"durability"`
	DurabilityReason string `json:"durability_reason,omitempty"`
	// Survives says in words what a 202 survives (an instance crash, a
	// restart of Redis, the loss of its master), from Durability and
	// Replicated: the modes that answer 202 only (async, mq).
	Survives string `json:"survives,omitempty"`
	// StartsAt and EndsAt are the sale window (absent: no bound); Now is
	// the service's clock as it answered, to the millisecond, so that a
	// page counts down to StartsAt on the clock that will judge it.
	StartsAt *time.Time `json:"starts_at,omitempty"`
	EndsAt   *time.Time `json:"ends_at,omitempty"`
	Now      time.Time  `json:"now"`
	// AccountsBefore: only accounts made before it buy (absent: any).
	AccountsBefore *time.Time `json:"accounts_before,omitempty"`
	// Reservation: only buyers who reserved before StartsAt buy;
	// Reservations is how many have (absent when Reservation is false).
	Reservation  bool   `json:"reservation,omitempty"`
	Reservations *int64 `json:"reservations,omitempty"`
}

// Durabilities of a product view: the Redis persistence its stock and
// queue rest on (docs/INVARIANT.md).
const (
	// DurabilityNone: no append-only file; a restart comes back empty, or
	// with an old RDB snapshot. Unreadable settings are taken as this.
	DurabilityNone = "none"
	// DurabilityEverysec: an append-only file fsynced about every second.
	DurabilityEverysec = "everysec"
	// DurabilityAlways: an append-only file fsynced before each answer.
	DurabilityAlways = "always"
)

// ShardView is one shard's stock and where it is kept.
type ShardView struct {
	Key   string `json:"key"`
	Stock int    `json:"stock"`
}

// Verdicts of an Audit.
const (
	VerdictOK = "OK"
	// VerdictOversold: more orders than the sale's stock.
	VerdictOversold = "OVERSOLD"
	// VerdictInconsistent: more orders than units the store counts as gone
	// (lost updates): the store will sell those units again.
	VerdictInconsistent = "INCONSISTENT"
	// VerdictLost: units left the store and are in no order: in flight,
	// or stranded until the reconciler returns them.
	VerdictLost = "LOST"
	// VerdictSettling: the counts add up once the queued entries whose
	// orders are written already are counted once (Replaying): entries a
	// consumer wrote and could not acknowledge (Redis restarted from its
	// append-only file), which it acknowledges when it meets them again.
	VerdictSettling = "SETTLING"
	// VerdictRebuilt: the counts add up, and the sale's stock was laid out
	// anew from the orders after Redis lost it (Rebuilt): the orders
	// answered 202 and queued in Redis then cannot be counted.
	VerdictRebuilt = "REBUILT"
	// VerdictToldNotStored: buyers were told of more orders (201, 202)
	// than the sale's rows, queue and dead letters hold (ToldNotStored):
	// an acknowledged order was lost, though the units may balance.
	VerdictToldNotStored = "TOLD_NOT_STORED"
)

// Audit is GET /api/products/:id/audit: the current sale's orders against
// the stock left in the store and the takes recorded.
type Audit struct {
	ProductID int64 `json:"product_id"`
	Sale      int64 `json:"sale"`
	Initial   int   `json:"initial"`
	Remaining int   `json:"remaining"`
	// Taken is the takes the store recorded (its ledger, for stock in
	// Redis), or Initial − Remaining for stock in SQL.
	Taken  int `json:"taken"`
	Orders int `json:"orders"`
	// Queued is the orders taken and queued, not written yet (the async
	// mode): initial = remaining + orders + queued on a quiet product.
	Queued int `json:"queued"`
	// Oversold is max(0, Orders − Initial).
	Oversold int `json:"oversold"`
	// LostUpdates is Orders + Queued − Replaying − (Initial − Remaining).
	LostUpdates int `json:"lost_updates"`
	// DeadLettered is the sale's orders answered 202 that the database
	// refused since: each is in the dead letters with the reason, and its
	// unit went back to its shard (counted in Remaining). A client's 202s
	// are Orders + DeadLettered once the queue has drained.
	DeadLettered int `json:"dead_lettered"`
	// Unsettled is max(0, Taken − Orders − Queued): purchases in flight, or
	// takes stranded until the reconciler returns their units.
	Unsettled int `json:"unsettled"`
	// Unpaid and Paid split Orders; Cancelled is the sale's cancelled
	// orders, whose units went back on sale.
	Unpaid    int    `json:"unpaid"`
	Paid      int    `json:"paid"`
	Cancelled int    `json:"cancelled"`
	Verdict   string `json:"verdict"`
	// Shards is the same count shard by shard.
	Shards []ShardAudit `json:"shards,omitempty"`
	// Reconciled is the reconciler's last pass over the product, if any.
	Reconciled *Reconciliation `json:"reconciled,omitempty"`
	// Replaying is those of Queued whose order ids have a row already
	// (an order, or a void row): counted once, in Orders, by LostUpdates
	// and the verdict. Read only when the counts show more units than
	// are gone.
	Replaying int `json:"replaying,omitempty"`
	// Rebuilt says the sale's stock was laid out anew after Redis lost it.
	Rebuilt *Rebuilt `json:"rebuilt,omitempty"`
	// Repaired is the takes the store forgot and the repair recorded again
	// in this layout, if any.
	Repaired *Repaired `json:"repaired,omitempty"`
	// Told is the orders of the sale the instances told their buyers of
	// (201, 202; a replay once), as far as their counts reached Redis: a
	// lower bound. ToldNotStored is how many more than the sale's rows
	// (void ones aside), queued orders and dead letters hold.
	Told          int `json:"told"`
	ToldNotStored int `json:"told_not_stored"`
}

// Rebuilt is the last rebuild of a sale's stock from its orders.
type Rebuilt struct {
	At time.Time `json:"at"`
	// Uncounted says what the audit cannot count since.
	Uncounted string `json:"uncounted"`
}

// Repaired is an audit's count of the takes a shard had forgotten (their
// orders existed) that were recorded again: Takes in all, Units of them
// with their unit taken back out of the stock, Short without, because the
// stock had no unit left (the unit was sold twice).
type Repaired struct {
	Takes int `json:"takes"`
	Units int `json:"units"`
	Short int `json:"short"`
}

// Drain is GET /api/products/:id/drain: how the current sale's queued
// orders (the async mode) reached their rows.
type Drain struct {
	// Written is the queued orders written; Queued those still queued.
	Written int `json:"written"`
	Queued  int `json:"queued"`
	// P50MS, P99MS and MaxMS are percentiles of the time from a purchase's
	// 202 to its order's row.
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	MaxMS float64 `json:"max_ms"`
}

// ShardAudit is one shard's part of an audit.
type ShardAudit struct {
	Shard     int `json:"shard"`
	Initial   int `json:"initial"`
	Remaining int `json:"remaining"`
	Orders    int `json:"orders"`
	Queued    int `json:"queued"`
}

// Reconciliation is one pass of the reconciler over a product's sale, the
// answer of POST /api/products/:id/reconcile.
type Reconciliation struct {
	At time.Time `json:"at"`
	// Takes is the takes the pass examined.
	Takes int `json:"takes"`
	// Pending is the takes too young to judge: their purchase may be in flight.
	Pending int `json:"pending"`
	// Returned is the units of stranded takes that went back to the store.
	Returned int `json:"returned"`
	// Orphans is the orders that no take names: reported, not changed.
	Orphans int `json:"orphans"`
	// Restored is the orders whose take the store had forgotten (a Redis
	// back from a file that lost its last writes, a replica promoted
	// without them), recorded again with their unit taken back out of the
	// stock; Short those recorded again when the shard had no unit left:
	// sold twice (the audit says OVERSOLD).
	Restored int `json:"restored,omitempty"`
	Short    int `json:"short,omitempty"`
	// Expired is the unpaid orders past their payment window whose
	// deadline the delay queue had lost, cancelled by this pass.
	Expired int `json:"expired"`
	// Queue is the mq mode's broker queue depth the pass saw (messages not
	// yet delivered), and Held the takes of that mode it left pending
	// because of it (counted in Pending too): while the queue holds
	// messages, a take's order may be one of them.
	Queue int `json:"queue,omitempty"`
	Held  int `json:"held,omitempty"`
	// Error is why the pass stopped early, if it did.
	Error string `json:"error,omitempty"`
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
	// ReleaseBeforeCommit releases the sqlrmw mode's lock before the
	// transaction's COMMIT, so that the next holder reads the old value.
	ReleaseBeforeCommit bool `json:"release_before_commit,omitempty"`
	// Trace asks for the purchase's Trace in the answer.
	Trace bool `json:"trace,omitempty"`
	// CrashAfterTake stops the purchase between the take and the order's
	// write (or, in the mq mode, its publish), as a process that died
	// there would: the unit stays taken, no order, 503 unavailable.
	CrashAfterTake bool `json:"crash_after_take,omitempty"`
	// Poison queues the async mode's order with a row the database refuses
	// (an idempotency key longer than its column): the consumer sends it
	// to the dead letters and its unit back on sale. MySQL only.
	Poison bool `json:"poison,omitempty"`
	// PathToken is the purchase path token a product with path asks for
	// (POST /api/products/:id/path); it buys once.
	PathToken string `json:"path_token,omitempty"`
}

// PathRequest is the body of POST /api/products/:id/path: the solved
// captcha, on a product that asks for one.
type PathRequest struct {
	CaptchaID string `json:"captcha_id,omitempty"`
	Captcha   string `json:"captcha,omitempty"`
}

// ReservationRequest is the body of POST /api/products/:id/reservation,
// which may be empty: on a lab product, the buyer it names.
type ReservationRequest struct {
	UserID *int64 `json:"user_id,omitempty"`
}

// Reservation is the answer of POST /api/products/:id/reservation: the
// buyer's reservation, stored (201 the first time, 200 after), and how
// many buyers have reserved the product.
type Reservation struct {
	ProductID    int64     `json:"product_id"`
	UserID       int64     `json:"user_id"`
	ReservedAt   time.Time `json:"reserved_at"`
	Reservations int64     `json:"reservations"`
}

// Path is a purchase path token, the answer of POST
// /api/products/:id/path: send it as path_token with one purchase.
type Path struct {
	Token     string    `json:"path_token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// CaptchaRequest is the body of POST /api/captcha: what the captcha is for,
// a product's purchase path (ProductID, by a signed-in buyer) or an account
// (For "account", from the client's network).
type CaptchaRequest struct {
	ProductID int64  `json:"product_id,omitempty"`
	For       string `json:"for,omitempty"`
}

// CaptchaForAccount is CaptchaRequest.For for a captcha that creates an
// account.
const CaptchaForAccount = "account"

// Captcha is a captcha to solve, the answer of POST /api/captcha: its
// image is at Image (a PNG of CaptchaDigits digits).
type Captcha struct {
	ID    string `json:"captcha_id"`
	Image string `json:"image"`
}

// Order is an order, the answer of POST /api/orders and GET
// /api/orders/:id. Its id is a decimal string: ids exceed 2^53, past which a
// JavaScript number loses integers.
type Order struct {
	ID        string `json:"id"`
	ProductID int64  `json:"product_id"`
	Sale      int64  `json:"sale"`
	UserID    int64  `json:"user_id"`
	Shard     int    `json:"shard"`
	Lock      string `json:"lock"`
	Mode      string `json:"mode"`
	// Status is unpaid for an order written, then paid or cancelled;
	// pending for one queued (the async mode) and not written yet; failed
	// for a queued one the database refused, with the Reason (its unit
	// went back on sale).
	Status    string    `json:"status"`
	Reason    string    `json:"reason,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// DueAt is when an unpaid order is cancelled, if its product has a
	// payment window.
	DueAt       *time.Time `json:"due_at,omitempty"`
	PaidAt      *time.Time `json:"paid_at,omitempty"`
	CancelledAt *time.Time `json:"cancelled_at,omitempty"`
	// CancelledBy is "buyer" or "timeout".
	CancelledBy string `json:"cancelled_by,omitempty"`
	// Trace is the purchase's trace, when it asked for one.
	Trace *Trace `json:"trace,omitempty"`
}

// BuyerRequest is the body of POST /api/orders/:id/pay and /cancel: the
// buyer the order must belong to.
type BuyerRequest struct {
	UserID *int64 `json:"user_id"`
}

// Health is GET /healthz when Redis and the database answer.
type Health struct {
	Status string `json:"status"` // "ok"
	Mode   string `json:"mode"`   // "embedded" or "external"
	Redis  string `json:"redis"`  // server version
	SQL    string `json:"sql"`    // dialect and version
	// Queue is the async mode's backlog, over every product.
	Queue Backlog `json:"queue"`
}

// Backlog is the async mode's queue of orders taken and not written yet.
type Backlog struct {
	// Streams is the streams that may hold orders (one per shard in use).
	Streams int `json:"streams"`
	// Queued is the orders in them: not delivered yet, or delivered and not
	// acknowledged.
	Queued int64 `json:"queued"`
	// Delivered is those of Queued delivered to a consumer and not
	// acknowledged: being written, or left by a consumer that died until
	// another claims them.
	Delivered int64 `json:"delivered"`
	// OldestMS is the age of the oldest queued order, 0 when none is.
	OldestMS int64 `json:"oldest_ms"`
}

// LockInfo is one rung of the lock ladder, GET /api/locks.
// ModeInfo is one sale mode as GET /api/modes lists it: the table in
// internal/order (mode.go), in teaching order.
type ModeInfo struct {
	Name string `json:"name"`
	// Short names the mode's steps in a few words, for a menu.
	Short    string `json:"short"`
	Summary  string `json:"summary"`
	Promises string `json:"promises"`
	Breaks   string `json:"breaks"`
	// Store holds the mode's stock: "redis" or "sql".
	Store string `json:"store"`
	// Locked: the mode takes its unit inside the product's lock.
	Locked bool `json:"locked"`
	// Queued: the buyer hears 202 before the order's row is written.
	Queued bool `json:"queued"`
	// Test is the command that shows the mode's promise or its flaw.
	Test string `json:"test"`
}

type LockInfo struct {
	Name     string   `json:"name"`
	Summary  string   `json:"summary"`
	Fixes    string   `json:"fixes"`
	Breaks   string   `json:"breaks"`
	Commands []string `json:"commands"`
	Test     string   `json:"test"`
}

// LookupRequest is POST /api/orders/lookup: order ids of one product, at
// most 1000.
type LookupRequest struct {
	ProductID int64    `json:"product_id"`
	IDs       []string `json:"ids"`
}

// Lookup is its answer: which of the ids are rows of orders (void rows
// aside), and which are not.
type Lookup struct {
	Found   []string `json:"found"`
	Missing []string `json:"missing"`
}

// SessionRequest is the body of POST /api/sessions: a name and its
// password; without the password, the demo sign-in by name (on only with
// demo accounts, and never to an account that has a password).
type SessionRequest struct {
	Name     string `json:"name"`
	Password string `json:"password,omitempty"`
}

// AccountRequest is the body of POST /api/accounts. CaptchaID and Captcha
// are a captcha's (POST /api/captcha {"for":"account"}) once the
// address's network made its first few accounts (403 captcha_required).
type AccountRequest struct {
	Name      string `json:"name"`
	Password  string `json:"password"`
	CaptchaID string `json:"captcha_id,omitempty"`
	Captcha   string `json:"captcha,omitempty"`
}

// Account is a made account.
type Account struct {
	BuyerID int64  `json:"buyer_id"`
	Name    string `json:"name"`
}

// PasswordChange is the body of POST /api/accounts/current/password.
type PasswordChange struct {
	Password    string `json:"password"`
	NewPassword string `json:"new_password"`
}

// AccountOptions is GET /api/accounts/options: whether the demo sign-in
// by name is on, and the shortest password an account takes.
type AccountOptions struct {
	Demo        bool `json:"demo"`
	MinPassword int  `json:"min_password"`
	// Passkeys: the passkey routes are there, for pages served from
	// PasskeyOrigins (the relying party's, -rp-origins).
	Passkeys       bool     `json:"passkeys"`
	PasskeyOrigins []string `json:"passkey_origins,omitempty"`
}

// BulkAccounts is the body of the operator's POST /api/accounts/bulk:
// names of buyers without a password, each signed in at once.
type BulkAccounts struct {
	Names []string `json:"names"`
}

// BulkSessions answers BulkAccounts: a session per name, in its order.
type BulkSessions struct {
	Sessions []Session `json:"sessions"`
}

// CurrentSession is GET /api/sessions/current.
type CurrentSession struct {
	BuyerID   int64     `json:"buyer_id"`
	Name      string    `json:"name"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Session is a signed-in buyer: send Token as Authorization: Bearer
// <token> to buy, pay, cancel and read orders of products that are not
// lab products.
type Session struct {
	Token     string    `json:"token"`
	BuyerID   int64     `json:"buyer_id"`
	Name      string    `json:"name"`
	ExpiresAt time.Time `json:"expires_at"`
}
