package harness

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"seckill/internal/api"
)

// Traced is one answer's trace as the harness received it: who bought, when
// the request was sent and its answer received (microseconds since the run
// started, on the harness's monotonic clock), and the service's trace, nil
// when the answer carried none.
type Traced struct {
	User   int64
	SentUS int64
	RecvUS int64
	Trace  *api.Trace
}

// BuildTimeline turns a run's traces into its timeline: each trace placed
// on the run's clock, a bar per critical section, the overlaps, the lost
// updates and the sentence. startUnixUS is the run's start on the
// harness's wall clock, userBase its buyers' base.
//
// A trace's times are the service's monotonic offsets from its receipt of
// the request, and its receipt on the service's wall clock: on one machine
// that is the harness's clock too, which lines up purchases served by
// several instances. Across machines the clocks may disagree, so a receipt
// is clamped into the request's own window, [sent, received − took]: no
// purchase is drawn outside the time the harness saw it in flight.
func BuildTimeline(traces []Traced, shards int, startUnixUS, userBase int64) *api.Timeline {
	tl := &api.Timeline{Shards: shards}
	for _, tr := range traces {
		tl.SpanUS = max(tl.SpanUS, tr.RecvUS)
		if tr.Trace == nil {
			tl.Untraced++
			continue
		}
		tl.Traced++
		hi := max(tr.SentUS, tr.RecvUS-tr.Trace.TookUS)
		base := min(max(tr.Trace.ReceivedUnixUS-startUnixUS, tr.SentUS), hi)
		for _, s := range tr.Trace.Sections {
			b := newBar(s, base, tr.User-userBase)
			tl.Shards = max(tl.Shards, b.Shard+1)
			tl.SpanUS = max(tl.SpanUS, b.EndUS)
			tl.Bars = append(tl.Bars, b)
		}
	}
	// By start, then buyer: the same traces give the same timeline.
	slices.SortStableFunc(tl.Bars, func(a, b api.Bar) int {
		return cmp.Or(cmp.Compare(a.StartUS, b.StartUS), cmp.Compare(a.Buyer, b.Buyer))
	})
	lanes := make([][]int, tl.Shards)
	for i, b := range tl.Bars {
		lanes[b.Shard] = append(lanes[b.Shard], i)
	}
	tl.Rows = make([]int, tl.Shards)
	var first overlap
	for k, lane := range lanes {
		tl.Rows[k] = assignRows(tl.Bars, lane)
		if o := markOverlaps(tl.Bars, lane); o.found() && (!first.found() || tl.Bars[o.b].StartUS < tl.Bars[first.b].StartUS) {
			first = o
		}
	}
	lost := markLostUpdates(tl.Bars, lanes)
	for _, b := range tl.Bars {
		if b.Overlap {
			tl.Overlapping++
		}
		if b.Lost {
			tl.LostUpdates++
		}
		if b.Outcome == api.OutcomeRefused {
			tl.Refused++
		}
		if b.Stale {
			tl.Stale++
		}
	}
	tl.Sentence, tl.Focus = sentence(tl, lost, first)
	return tl
}

// newBar places a section on the run's clock.
func newBar(s api.TraceSection, base, buyer int64) api.Bar {
	at := func(us *int64) *int64 {
		if us == nil {
			return nil
		}
		v := base + *us
		return &v
	}
	b := api.Bar{Buyer: buyer, Shard: s.Shard, Token: s.Token, Outcome: s.Outcome, Read: s.Read, Wrote: s.Wrote,
		ReadUS: at(s.ReadUS), WriteUS: at(s.WriteUS), CommitUS: at(s.CommitUS)}
	// The first of the times given, in the order they are listed.
	first := func(ts ...*int64) int64 {
		for _, t := range ts {
			if t != nil {
				return *t
			}
		}
		return base
	}
	switch {
	case s.AcquireUS != nil:
		b.Kind = api.BarLock
		b.StartUS = base + *s.AcquireUS
		b.EndUS = first(at(s.ReleaseUS), at(s.CommitUS), at(s.DoneUS))
	case s.ReadUS != nil:
		b.Kind = api.BarRMW
		b.StartUS = *b.ReadUS
		b.EndUS = first(b.CommitUS, at(s.DoneUS), b.WriteUS, b.ReadUS)
	default:
		b.Kind = api.BarAtomic
		b.StartUS = first(b.WriteUS)
		b.EndUS = first(at(s.DoneUS), b.WriteUS)
	}
	b.EndUS = max(b.EndUS, b.StartUS)
	b.Stale = s.LeaseLost || s.Outcome == api.OutcomeRefused
	if b.Stale && s.LeaseUS > 0 && b.Kind == api.BarLock {
		end := b.StartUS + s.LeaseUS
		b.LeaseEndUS = &end
	}
	return b
}

// assignRows gives each bar of a lane (indexes, by start) the first sub-row
// free at its start, and returns the rows the lane needs.
func assignRows(bars []api.Bar, lane []int) int {
	var ends []int64 // per row, the end of its last bar
	for _, i := range lane {
		row := slices.IndexFunc(ends, func(end int64) bool { return end <= bars[i].StartUS })
		if row < 0 {
			row = min(len(ends), api.MaxTimelineRows-1)
			if row == len(ends) {
				ends = append(ends, 0)
			}
		}
		ends[row] = max(ends[row], bars[i].EndUS)
		bars[i].Row = row
	}
	return max(len(ends), 1)
}

// overlap names two bars, by index, that overlap: a began before b and
// ended after b began. Zero is none.
type overlap struct{ a, b int }

func (o overlap) found() bool { return o != overlap{} }

// markOverlaps marks the bars of a lane (indexes, by start) that overlap
// another bar of the lane, the atomic ones aside, and returns the first
// overlap. A bar overlaps an earlier one when it starts before the latest
// end so far, and a later one when the next starts before it ends.
func markOverlaps(bars []api.Bar, lane []int) overlap {
	var first overlap
	var ranged []int
	for _, i := range lane {
		if bars[i].Kind != api.BarAtomic {
			ranged = append(ranged, i)
		}
	}
	latest := -1 // the bar with the latest end so far
	for n, i := range ranged {
		b := &bars[i]
		if latest >= 0 && b.StartUS < bars[latest].EndUS {
			b.Overlap, bars[latest].Overlap = true, true
			if !first.found() {
				first = overlap{latest, i}
			}
		}
		if n+1 < len(ranged) && bars[ranged[n+1]].StartUS < b.EndUS {
			b.Overlap = true
		}
		if latest < 0 || b.EndUS > bars[latest].EndUS {
			latest = i
		}
	}
	return first
}

// markLostUpdates marks, per shard, the writes that carried a value an
// earlier write had carried: stock only goes down, one per sale, so each
// is a decrement lost. It returns the first two bars of the first lost
// update (the one whose repeat came first), or nil.
func markLostUpdates(bars []api.Bar, lanes [][]int) []int {
	var first []int
	for _, lane := range lanes {
		byValue := make(map[int][]int)
		for _, i := range lane {
			b := bars[i]
			if b.Outcome == api.OutcomeTaken && b.Wrote != nil && b.WriteUS != nil {
				byValue[*b.Wrote] = append(byValue[*b.Wrote], i)
			}
		}
		for _, w := range byValue {
			if len(w) < 2 {
				continue
			}
			slices.SortFunc(w, func(x, y int) int { return cmp.Compare(*bars[x].WriteUS, *bars[y].WriteUS) })
			for _, i := range w[1:] {
				bars[i].Lost = true
			}
			if first == nil || *bars[w[1]].WriteUS < *bars[first[1]].WriteUS {
				first = w[:2]
			}
		}
	}
	return first
}

// sentence tells the timeline's story in one line: the first lost update,
// else a refused stale write, else the first overlap, else a stale holder,
// else that nothing raced.
func sentence(tl *api.Timeline, lost []int, first overlap) (string, []int) {
	bars := tl.Bars
	if lost != nil {
		a, b := bars[lost[0]], bars[lost[1]]
		if a.ReadUS != nil && b.ReadUS != nil && *b.ReadUS < *a.ReadUS {
			a, b = b, a // told in the order they read
		}
		read := "both read " + value(a.Read)
		if a.Read == nil || b.Read == nil || *a.Read != *b.Read {
			read = "read " + value(a.Read) + " and " + value(b.Read)
		}
		return fmt.Sprintf("buyers %d and %d %s from shard %d at %s and both wrote %d",
			a.Buyer, b.Buyer, read, a.Shard, when(a.ReadUS, b.ReadUS), *a.Wrote), lost
	}
	if i := slices.IndexFunc(bars, func(b api.Bar) bool { return b.Outcome == api.OutcomeRefused }); i >= 0 {
		b := bars[i]
		s := fmt.Sprintf("buyer %d's fenced write to shard %d was refused at %s", b.Buyer, b.Shard, ms(b.EndUS))
		if b.WriteUS == nil {
			s = fmt.Sprintf("buyer %d's fenced read of shard %d was refused at %s", b.Buyer, b.Shard, ms(b.EndUS))
		}
		if b.LeaseEndUS != nil {
			s += fmt.Sprintf(": its lease had run out at %s and a newer holder had been at the shard", ms(*b.LeaseEndUS))
		}
		return s, []int{i}
	}
	if first.found() {
		a, b := bars[first.a], bars[first.b]
		return fmt.Sprintf("buyers %d and %d were inside shard %d's critical section together from %s to %s, and no two writes carried the same value",
			a.Buyer, b.Buyer, a.Shard, ms(b.StartUS), ms(min(a.EndUS, b.EndUS))), []int{first.a, first.b}
	}
	if i := slices.IndexFunc(bars, func(b api.Bar) bool { return b.Stale }); i >= 0 {
		b := bars[i]
		return fmt.Sprintf("buyer %d held shard %d past its lease and its release found the lock gone at %s", b.Buyer, b.Shard, ms(b.EndUS)), []int{i}
	}
	switch {
	case len(bars) == 0:
		return "no purchase reached a shard: nothing to draw", nil
	case !slices.ContainsFunc(bars, func(b api.Bar) bool { return b.Kind != api.BarAtomic }):
		return "every take was one atomic step: nothing read and written back, nothing to overlap", nil
	}
	return "no two purchases were inside one shard's critical section at once, and no two writes carried the same value", nil
}

func value(v *int) string {
	if v == nil {
		return "?"
	}
	return fmt.Sprint(*v)
}

// ms writes microseconds as milliseconds to the hundredth.
func ms(us int64) string { return fmt.Sprintf("%.2f ms", float64(us)/1000) }

// when writes one time, or two when they differ to the hundredth of a ms.
func when(a, b *int64) string {
	switch {
	case a == nil || b == nil:
		return "?"
	case math.Round(float64(*a)/10) == math.Round(float64(*b)/10):
		return ms(*a)
	}
	return fmt.Sprintf("%.2f and %s", float64(*a)/1000, ms(*b))
}
