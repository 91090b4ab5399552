package reconcile

import (
	"context"
)

// ReconcileScheduled runs a pass as the schedule does: from what this
// process's last pass settled.
func (rec *Reconciler) ReconcileScheduled(ctx context.Context, id int64) (Reconciliation, error) {
	return rec.pass(ctx, id, false)
}

// Remembered is the number of takes the last pass over a product left
// settled for the next, and -1 when it left nothing (the next reads every
// order).
func (rec *Reconciler) Remembered(id int64) int {
	v, ok := rec.passes.Load(id)
	if !ok {
		return -1
	}
	return len(v.(*passState).settled)
}
