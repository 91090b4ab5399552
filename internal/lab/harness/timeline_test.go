package harness

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"seckill/internal/api"
)

func us(v int64) *int64 { return &v }
func n(v int) *int      { return &v }

// traced is a purchase received at the run's start + at µs, on one clock
// with the harness, sent 10µs before and answered 10µs after its sections.
func traced(user, at int64, sections ...api.TraceSection) Traced {
	var took int64
	for _, s := range sections {
		for _, t := range []*int64{s.AcquireUS, s.ReadUS, s.WriteUS, s.CommitUS, s.ReleaseUS, s.DoneUS} {
			if t != nil {
				took = max(took, *t)
			}
		}
	}
	return Traced{User: user, SentUS: at - 10, RecvUS: at + took + 10,
		Trace: &api.Trace{ReceivedUnixUS: startUnix + at, TookUS: took, Sections: sections}}
}

const (
	startUnix = 1_700_000_000_000_000
	userBase  = 5000
)

// TestTimelineOfKnownTraces feeds the traces of a race the test knows: on
// shard 2, buyers 17 and 23 both read 20 at 3.10 ms and both write 19
// (their bars overlap: a lost update); buyer 30 reads 19 after both and
// writes 18 alone; on shard 0 buyers 1 and 2 take turns under a lock, and
// buyer 3's lua take is atomic. The timeline must find exactly the
// overlap, the lost update, and say it in one sentence.
func TestTimelineOfKnownTraces(t *testing.T) {
	rmw := func(read, write, done int64, v int) api.TraceSection {
		return api.TraceSection{Shard: 2, ReadUS: us(read), Read: n(v), WriteUS: us(write), Wrote: n(v - 1), DoneUS: us(done), Outcome: api.OutcomeTaken}
	}
	locked := func(acq, read, write, rel int64, v int) api.TraceSection {
		return api.TraceSection{Shard: 0, Token: 7, LeaseUS: 5_000_000, AcquireUS: us(acq), ReadUS: us(read), Read: n(v),
			WriteUS: us(write), Wrote: n(v - 1), DoneUS: us(write + 50), ReleaseUS: us(rel), Outcome: api.OutcomeTaken}
	}
	traces := []Traced{
		traced(userBase+17, 3000, rmw(100, 400, 450, 20)), // reads at 3.10 ms
		traced(userBase+23, 3050, rmw(50, 600, 650, 20)),  // reads at 3.10 ms too
		traced(userBase+30, 4000, rmw(100, 200, 250, 19)),
		traced(userBase+1, 1000, locked(10, 20, 30, 100, 10)),
		traced(userBase+2, 1090, locked(20, 30, 40, 100, 9)), // acquires at 1.11 ms, after 1's release at 1.10 ms
		traced(userBase+3, 1100, api.TraceSection{Shard: 0, WriteUS: us(5), DoneUS: us(60), Outcome: api.OutcomeTaken}),
		{User: userBase + 4, SentUS: 900, RecvUS: 950}, // an answer without a trace
	}
	tl := BuildTimeline(traces, 3, startUnix, userBase)

	if want := "buyers 17 and 23 both read 20 from shard 2 at 3.10 ms and both wrote 19"; tl.Sentence != want {
		t.Errorf("sentence %q, want %q", tl.Sentence, want)
	}
	type bar struct {
		Buyer           int64
		Kind            string
		Start, End      int64
		Overlap, Lost   bool
		Row             int
		Focus, HasLease bool
	}
	var got []bar
	focus := map[int]bool{}
	for _, i := range tl.Focus {
		focus[i] = true
	}
	for i, b := range tl.Bars {
		got = append(got, bar{b.Buyer, b.Kind, b.StartUS, b.EndUS, b.Overlap, b.Lost, b.Row, focus[i], b.LeaseEndUS != nil})
	}
	want := []bar{
		{Buyer: 1, Kind: api.BarLock, Start: 1010, End: 1100},
		// Sorted by start: buyer 3's atomic take comes between 1 and 2, and
		// 2 goes a row down, under it (an atomic bar never counts as an overlap).
		{Buyer: 3, Kind: api.BarAtomic, Start: 1105, End: 1160},
		{Buyer: 2, Kind: api.BarLock, Start: 1110, End: 1190, Row: 1},
		{Buyer: 17, Kind: api.BarRMW, Start: 3100, End: 3450, Overlap: true, Focus: true},
		{Buyer: 23, Kind: api.BarRMW, Start: 3100, End: 3700, Overlap: true, Lost: true, Row: 1, Focus: true},
		{Buyer: 30, Kind: api.BarRMW, Start: 4100, End: 4250},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("bars (-want +got):\n%s", diff)
	}
	if tl.Overlapping != 2 || tl.LostUpdates != 1 || tl.Traced != 6 || tl.Untraced != 1 || tl.Refused != 0 {
		t.Errorf("overlapping %d, lost %d, traced %d, untraced %d, refused %d; want 2, 1, 6, 1, 0",
			tl.Overlapping, tl.LostUpdates, tl.Traced, tl.Untraced, tl.Refused)
	}
	if diff := cmp.Diff([]int{2, 1, 2}, tl.Rows); diff != "" {
		t.Errorf("rows per lane (-want +got):\n%s", diff)
	}
}

// TestTimelineOfAStaleFencedHolder: buyer 1 holds shard 0 past its 200 ms
// lease; buyer 2 takes the lock at 210 ms and writes; buyer 1's write at
// 300 ms is refused. The bars overlap, nothing is lost, and the sentence
// tells the refusal with the lease's end.
func TestTimelineOfAStaleFencedHolder(t *testing.T) {
	traces := []Traced{
		traced(userBase+1, 0, api.TraceSection{Shard: 0, Token: 1, LeaseUS: 200_000, AcquireUS: us(10), ReadUS: us(20), Read: n(5),
			WriteUS: us(300_000), Wrote: n(4), DoneUS: us(300_100), ReleaseUS: us(300_200), LeaseLost: true, Outcome: api.OutcomeRefused}),
		traced(userBase+2, 200_000, api.TraceSection{Shard: 0, Token: 2, LeaseUS: 200_000, AcquireUS: us(10_000), ReadUS: us(10_100), Read: n(5),
			WriteUS: us(10_200), Wrote: n(4), DoneUS: us(10_300), ReleaseUS: us(10_400), Outcome: api.OutcomeTaken}),
	}
	tl := BuildTimeline(traces, 1, startUnix, userBase)
	want := "buyer 1's fenced write to shard 0 was refused at 300.20 ms: its lease had run out at 200.01 ms and a newer holder had been at the shard"
	if tl.Sentence != want {
		t.Errorf("sentence %q, want %q", tl.Sentence, want)
	}
	if tl.LostUpdates != 0 || tl.Overlapping != 2 || tl.Refused != 1 || tl.Stale != 1 {
		t.Errorf("lost %d, overlapping %d, refused %d, stale %d; want 0, 2, 1, 1", tl.LostUpdates, tl.Overlapping, tl.Refused, tl.Stale)
	}
	if b := tl.Bars[0]; b.LeaseEndUS == nil || *b.LeaseEndUS != 200_010 || b.EndUS != 300_200 {
		t.Errorf("the stale bar: %+v, want it to end at 300200 past its lease's end at 200010", b)
	}
}

// TestTimelineClampsASkewedClock: a service whose wall clock is 1 s ahead
// of the harness's is drawn inside the request's own window, not 1 s late.
func TestTimelineClampsASkewedClock(t *testing.T) {
	tr := traced(userBase+1, 500, api.TraceSection{Shard: 0, WriteUS: us(20), DoneUS: us(40), Outcome: api.OutcomeTaken})
	tr.Trace.ReceivedUnixUS += 1_000_000
	tl := BuildTimeline([]Traced{tr}, 1, startUnix, userBase)
	if b := tl.Bars[0]; b.StartUS < tr.SentUS || b.EndUS > tr.RecvUS {
		t.Errorf("bar %d–%d µs, outside the request's window %d–%d", b.StartUS, b.EndUS, tr.SentUS, tr.RecvUS)
	}
}
