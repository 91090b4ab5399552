package reconcile

import "time"

// The reports of the reconciler, as the domain keeps them; the server
// turns them into the API's bodies (internal/api), which may change on
// their own. A Reconciliation is also kept in Redis as JSON (the last pass
// over a product), under its field names: encoding/json matches names
// regardless of case, so the lower-case names an earlier version wrote
// read back the same.

// Audit is the current sale's orders against
// the stock left in the store and the takes recorded.
type Audit struct {
	ProductID int64
	Sale      int64
	Initial   int
	Remaining int
	// Taken is the takes the store recorded (its ledger, for stock in
	// Redis), or Initial − Remaining for stock in SQL.
	Taken  int
	Orders int
	// Queued is the orders taken and queued, not written yet (the async
	// mode): initial = remaining + orders + queued on a quiet product.
	Queued int
	// Oversold is max(0, Orders − Initial).
	Oversold int
	// LostUpdates is Orders + Queued − Replaying − (Initial − Remaining).
	LostUpdates int
	// DeadLettered is the sale's orders answered 202 that the database
	// refused since: each is in the dead letters with the reason, and its
	// unit went back to its shard (counted in Remaining). A client's 202s
	// are Orders + DeadLettered once the queue has drained.
	DeadLettered int
	// Unsettled is max(0, Taken − Orders − Queued): purchases in flight, or
	// takes stranded until the reconciler returns their units.
	Unsettled int
	// Unpaid and Paid split Orders; Cancelled is the sale's cancelled
	// orders, whose units went back on sale.
	Unpaid    int
	Paid      int
	Cancelled int
	Verdict   string
	// Shards is the same count shard by shard.
	Shards []ShardAudit
	// Reconciled is the reconciler's last pass over the product, if any.
	Reconciled *Reconciliation
	// Replaying is those of Queued whose order ids have a row already
	// (an order, or a void row): counted once, in Orders, by LostUpdates
	// and the verdict. Read only when the counts show more units than
	// are gone.
	Replaying int
	// Rebuilt says the sale's stock was laid out anew after Redis lost it.
	Rebuilt *Rebuilt
	// Repaired is the takes the store forgot and the repair recorded again
	// in this layout, if any.
	Repaired *Repaired
	// Told is the orders of the sale the processes told their buyers of
	// (201, 202), as far as their counts reached Redis (stock.ToldKey);
	// ToldNotStored is how many more than the sale's rows (void ones
	// aside), queued orders and dead letters hold.
	Told          int
	ToldNotStored int
}

// Rebuilt is the last rebuild of a sale's stock from its orders.
type Rebuilt struct {
	At time.Time
	// Uncounted says what the audit cannot count since.
	Uncounted string
}

// Repaired is an audit's count of the takes a shard had forgotten (their
// orders existed) that were recorded again: Takes in all, Units of them
// with their unit taken back out of the stock, Short without, because the
// stock had no unit left (the unit was sold twice).
type Repaired struct {
	Takes int
	Units int
	Short int
}

// Drain is how the current sale's queued
// orders (the async mode) reached their rows.
type Drain struct {
	// Written is the queued orders written; Queued those still queued.
	Written int
	Queued  int
	// P50MS, P99MS and MaxMS are percentiles of the time from a purchase's
	// 202 to its order's row.
	P50MS float64
	P99MS float64
	MaxMS float64
}

// ShardAudit is one shard's part of an audit.
type ShardAudit struct {
	Shard     int
	Initial   int
	Remaining int
	Orders    int
	Queued    int
}

// Reconciliation is one pass of the reconciler over a product's sale.
type Reconciliation struct {
	At time.Time
	// Takes is the takes the pass examined.
	Takes int
	// Pending is the takes too young to judge: their purchase may be in flight.
	Pending int
	// Returned is the units of stranded takes that went back to the store.
	Returned int
	// Orphans is the orders that no take names: reported, not changed.
	Orphans int
	// Restored is the orders whose take the store had forgotten (a Redis
	// back from a file that lost its last writes, a replica promoted
	// without them), recorded again with their unit taken back out of the
	// stock; Short those recorded again when the shard had no unit left:
	// sold twice (the audit says OVERSOLD).
	Restored int
	Short    int
	// Expired is the unpaid orders past their payment window whose
	// deadline the delay queue had lost, cancelled by this pass.
	Expired int
	// Queue is the mq mode's broker queue depth the pass saw (messages not
	// yet delivered), and Held the takes of that mode it left pending
	// because of it (counted in Pending too): while the queue holds
	// messages, a take's order may be one of them.
	Queue int
	Held  int
	// Error is why the pass stopped early, if it did.
	Error string
}
