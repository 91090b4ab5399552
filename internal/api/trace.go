package api

// Trace is what happened inside one purchase's critical sections, answered
// with the purchase (in the order's body, or in the error's) when its
// request asked with "trace": true, on a lab product.
//
// Times are microseconds since the service received the request, on its
// monotonic clock: exact within one purchase. ReceivedUnixUS is that moment
// on the service's wall clock, which places purchases served by several
// instances on one timeline (the harness clamps it into its own send and
// receive times, so that a skewed clock cannot move a purchase outside
// them).
type Trace struct {
	ReceivedUnixUS int64 `json:"received_unix_us"`
	// TookUS is the time from receipt to the answer.
	TookUS   int64          `json:"took_us"`
	Sections []TraceSection `json:"sections"`
}

// TraceSection is one shard tried: for a lock strategy, from the lock
// obtained to the release sent; without a lock, from the read to the write.
// A time is absent (nil) when the step did not happen.
type TraceSection struct {
	Shard int `json:"shard"`
	// Token is the lock's fencing token, 0 for a lock without one.
	Token uint64 `json:"token,omitempty"`
	// LeaseUS is the lease the lock was taken with, 0 without a lock or for
	// the modes that take none.
	LeaseUS int64 `json:"lease_us,omitempty"`
	// AcquireUS is when the lock was obtained (its reply received).
	AcquireUS *int64 `json:"acquire_us,omitempty"`
	// ReadUS and Read: when the stock was read (the reply received) and the
	// value read.
	ReadUS *int64 `json:"read_us,omitempty"`
	Read   *int   `json:"read,omitempty"`
	// WriteUS and Wrote: when the write was sent and the value it carried.
	// An atomic take (lua, db) has a write time and no values.
	WriteUS *int64 `json:"write_us,omitempty"`
	Wrote   *int   `json:"wrote,omitempty"`
	// CommitUS is when the transaction's COMMIT was sent (sqlrmw, db).
	CommitUS *int64 `json:"commit_us,omitempty"`
	// ReleaseUS is when the release was sent.
	ReleaseUS *int64 `json:"release_us,omitempty"`
	// DoneUS is when the section ended: the write's reply (atomic takes),
	// or the commit's.
	DoneUS *int64 `json:"done_us,omitempty"`
	// LeaseLost: the release found the lock no longer this holder's.
	LeaseLost bool `json:"lease_lost,omitempty"`
	// Outcome is one of the Outcome constants.
	Outcome string `json:"outcome"`
}

// Outcomes of a TraceSection.
const (
	OutcomeTaken = "taken" // a unit was taken
	OutcomeEmpty = "empty" // the shard was empty
	// OutcomeRefused: the fence refused the read or the write: a newer
	// holder had been at the shard.
	OutcomeRefused = "refused"
	OutcomeBefore  = "bought_before" // the buyer had taken a unit already
	OutcomeFailed  = "failed"        // an error ended the section
)
