package api

// Timeline is the picture of one run's race, computed by the harness from
// its purchases' traces, so that the page and the HTML report draw the same
// thing: one lane per shard, a bar per critical section, the overlaps and
// the lost updates found, and the first lost update in one sentence. GET
// /api/runs/:id/timeline serves a lab run's.
type Timeline struct {
	Shards int `json:"shards"`
	// SpanUS is the run's length: bars lie in [0, SpanUS], microseconds
	// since the run started.
	SpanUS int64 `json:"span_us"`
	// Traced is the purchases that answered with a trace; Untraced the
	// answers without one (refused before any shard was tried, or lost in
	// transport).
	Traced   int `json:"traced"`
	Untraced int `json:"untraced"`
	// Overlapping is the bars that overlap another bar of their shard: two
	// buyers inside one shard's critical section at once.
	Overlapping int `json:"overlapping"`
	// LostUpdates is the writes that carried a value another write to the
	// same shard had carried already: each is a decrement lost.
	LostUpdates int `json:"lost_updates"`
	// Refused is the sections whose fenced read or write was refused; Stale
	// the sections whose holder outlived its lease (its release found the
	// lock gone) or was refused.
	Refused int `json:"refused"`
	Stale   int `json:"stale"`
	// Sentence tells the first lost update ("buyers 17 and 23 both read 20
	// from shard 2 at 3.10 ms and both wrote 19"), or else the first
	// overlap, refusal, or that there was none.
	Sentence string `json:"sentence"`
	// Focus are the bars the sentence is about, by index in Bars.
	Focus []int `json:"focus,omitempty"`
	// Rows is, per shard, the sub-rows its lane needs so that overlapping
	// bars are drawn apart (at most MaxTimelineRows).
	Rows []int `json:"rows"`
	Bars []Bar `json:"bars"`
}

// MaxTimelineRows bounds a lane's sub-rows; bars beyond share the last.
const MaxTimelineRows = 8

// Kinds of Bar.
const (
	// BarLock: a lock was held, from acquire to release.
	BarLock = "lock"
	// BarRMW: no lock; the bar runs from the read to the write.
	BarRMW = "rmw"
	// BarAtomic: one atomic step (lua, db); it cannot overlap anything.
	BarAtomic = "atomic"
)

// Bar is one critical section on the timeline, in microseconds since the
// run started. Times other than StartUS and EndUS are absent when the step
// did not happen.
type Bar struct {
	// Buyer is the buyer's number within the run, 1 to Buyers (user id −
	// user_base).
	Buyer int64  `json:"buyer"`
	Shard int    `json:"shard"`
	Row   int    `json:"row"`
	Kind  string `json:"kind"`
	// StartUS and EndUS bound the bar.
	StartUS int64  `json:"start_us"`
	EndUS   int64  `json:"end_us"`
	ReadUS  *int64 `json:"read_us,omitempty"`
	Read    *int   `json:"read,omitempty"`
	WriteUS *int64 `json:"write_us,omitempty"`
	Wrote   *int   `json:"wrote,omitempty"`
	// CommitUS is when the COMMIT was sent: after EndUS when the lock was
	// released before it.
	CommitUS *int64 `json:"commit_us,omitempty"`
	// LeaseEndUS is when the lease ran out, for a stale holder.
	LeaseEndUS *int64 `json:"lease_end_us,omitempty"`
	Token      uint64 `json:"token,omitempty"`
	Outcome    string `json:"outcome"`
	Overlap    bool   `json:"overlap,omitempty"`
	// Lost: its write carried the value an earlier write to the shard had.
	Lost  bool `json:"lost,omitempty"`
	Stale bool `json:"stale,omitempty"`
}
