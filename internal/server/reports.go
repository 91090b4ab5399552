package server

import (
	"seckill/internal/api"
	"seckill/internal/reconcile"
	"seckill/internal/stock"
)

// The reconciler's and the queue's reports as the API's bodies: the domain
// keeps its own types, and the wire contract changes only here.

func auditBody(a reconcile.Audit) api.Audit {
	out := api.Audit{ProductID: a.ProductID, Sale: a.Sale, Initial: a.Initial, Remaining: a.Remaining,
		Taken: a.Taken, Orders: a.Orders, Queued: a.Queued, Oversold: a.Oversold, LostUpdates: a.LostUpdates,
		DeadLettered: a.DeadLettered, Unsettled: a.Unsettled, Unpaid: a.Unpaid, Paid: a.Paid, Cancelled: a.Cancelled,
		Verdict: a.Verdict, Reconciled: reconciliationBody(a.Reconciled), Replaying: a.Replaying,
		Told: a.Told, ToldNotStored: a.ToldNotStored}
	for _, s := range a.Shards {
		out.Shards = append(out.Shards, api.ShardAudit(s))
	}
	if a.Rebuilt != nil {
		r := api.Rebuilt(*a.Rebuilt)
		out.Rebuilt = &r
	}
	if a.Repaired != nil {
		r := api.Repaired(*a.Repaired)
		out.Repaired = &r
	}
	return out
}

func reconciliationBody(r *reconcile.Reconciliation) *api.Reconciliation {
	if r == nil {
		return nil
	}
	out := api.Reconciliation(*r)
	return &out
}

func drainBody(d reconcile.Drain) api.Drain { return api.Drain(d) }

// BacklogBody is the async mode's queue as the API says it (GET /health).
func BacklogBody(b stock.Backlog) api.Backlog {
	return api.Backlog{Streams: b.Streams, Queued: b.Queued, Delivered: b.Delivered, OldestMS: b.Oldest.Milliseconds()}
}

// traceBody is a purchase's trace as the contract carries it. locked says
// whether a lock was really held: without one (lock none) the acquire and
// release times are the no-op lease's, and the section runs from read to
// write.
func traceBody(t *stock.Trace, locked bool) *api.Trace {
	if t == nil {
		return nil
	}
	out := &api.Trace{ReceivedUnixUS: t.Began().UnixMicro(), TookUS: t.Took().Microseconds(), Sections: []api.TraceSection{}}
	for _, s := range t.Sections() {
		sec := api.TraceSection(s)
		if !locked {
			sec.AcquireUS, sec.ReleaseUS, sec.LeaseUS = nil, nil, 0
		}
		out.Sections = append(out.Sections, sec)
	}
	return out
}
