package stock

import (
	"slices"
	"testing"
	"time"

	"seckill/internal/idgen"
	"seckill/internal/testkit"
)

// The registry's protocol on a cluster for the deadline sets, step by step,
// in the three orders a race can give (see registry.go): a schedule that
// opens a set between a close and the close's drop from the registry; an
// enrolment that arrives after a newer one; a close, and its drop, between
// a schedule's enrolment and its open. Each way an open set stays
// enrolled, and its deadline is claimed by a poller.
func TestRegistryKeepsADeadlineSetOpenedDuringAClose(t *testing.T) {
	rdb := testkit.OneNodeCluster(t)
	dl := NewStore(rdb, nil).Deadlines()
	set := Layout{ID: 1}.DueKey(0)
	ctx := t.Context()
	schedule := func(order int64) {
		t.Helper()
		if err := dl.Schedule(ctx, []Deadline{{Product: 1, Order: idgen.ID(order), Due: time.Now()}}); err != nil {
			t.Fatalf("scheduling order %d: %v", order, err)
		}
	}
	settle := func() []idgen.ID {
		t.Helper()
		ids, err := dl.ClaimDue(ctx, set, time.Now().Add(time.Second), time.Minute, 10)
		if err != nil {
			t.Fatal(err)
		}
		if err := dl.Unschedule(ctx, set, ids...); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	closeOnly := func() int64 {
		t.Helper()
		gen, err := closeDueScript.Run(ctx, rdb, []string{set, dueOpenKey(set), GenerationKey(set)}, 0).Int64()
		if err != nil || gen == 0 {
			t.Fatalf("closing the empty set: generation %d, %v", gen, err)
		}
		return gen
	}
	enrolled := func(when string, order int64) {
		t.Helper()
		sets, err := dl.DueSets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(sets, set) {
			t.Errorf("%s: the open set %s is not in the registry %v", when, set, sets)
		}
		if ids := settle(); !slices.Equal(ids, []idgen.ID{idgen.ID(order)}) {
			t.Errorf("%s: claimed %v, want order %d", when, ids, order)
		}
	}

	schedule(1)
	settle()
	gen := closeOnly()
	schedule(2) // finds the set closed: enrols it at gen, opens it
	if _, err := Unenrol(ctx, dl.rdb, dl.sets, set, gen); err != nil {
		t.Fatal(err)
	}
	enrolled("a schedule between a close and its drop", 2)

	gen = closeOnly()
	schedule(3)
	// A scheduler that read an older generation enrols late.
	if err := Enrol(ctx, dl.rdb, dl.sets, set, "0"); err != nil {
		t.Fatal(err)
	}
	if _, err := Unenrol(ctx, dl.rdb, dl.sets, set, gen); err != nil {
		t.Fatal(err)
	}
	enrolled("an enrolment at an older generation after a newer one", 3)

	// The schedule's steps one by one, a close and its drop in between.
	closeOnly()
	step := func(gen string) []any {
		t.Helper()
		res, err := scheduleScript.Run(ctx, rdb, []string{set, dueOpenKey(set), GenerationKey(set)}, gen, time.Now().UnixMilli(), "4").Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	read := step("")
	stale, _ := read[1].(string)
	if err := Enrol(ctx, dl.rdb, dl.sets, set, stale); err != nil {
		t.Fatal(err)
	}
	if _, err := Unenrol(ctx, dl.rdb, dl.sets, set, closeOnly()); err != nil {
		t.Fatal(err)
	}
	if res := step(stale); res[0] != int64(replyClosed) {
		t.Errorf("a schedule opened the set at generation %s, which a close had passed: %v", stale, res)
		enrolled("a close between a schedule's enrolment and its open", 4)
	}
}
