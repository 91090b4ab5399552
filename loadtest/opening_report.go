package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"seckill/internal/api"
)

// ms prints a duration in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// cellMS is a duration in milliseconds, for a table's cell.
func cellMS(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }

func itoa(n int) string { return fmt.Sprint(n) }

// quantiles are the p50 and p99 of the clicks' latencies.
func quantiles(cs []click) (p50, p99 string) {
	if len(cs) == 0 {
		return "-", "-"
	}
	l := make([]time.Duration, len(cs))
	for i, c := range cs {
		l[i] = c.latency()
	}
	return cellMS(quantile(l, 0.50)), cellMS(quantile(l, 0.99))
}

// durations prints the p50 and p99 of ds, which it sorts.
func durations(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return "p50 " + ms(quantile(ds, 0.50)) + ", p99 " + ms(quantile(ds, 0.99))
}

// quantile is the q-quantile of ds, which it sorts; 0 when empty.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// split sorts the opening's clicks by what they were told: every click
// that bought is a winner; the others are refusals, or early clicks when
// they were due before the opening.
func (r opening) split() (winners, refused, early []click) {
	for _, c := range r.clicks {
		switch {
		case c.won():
			winners = append(winners, c)
		case c.due < 0:
			early = append(early, c)
		default:
			refused = append(refused, c)
		}
	}
	return winners, refused, early
}

// answers counts the opening's clicks by what they were told.
func (r opening) answers() tally {
	var t tally
	for _, c := range r.clicks {
		t.add(c.status, c.code, c.err)
	}
	return t
}

// misled counts buyers told they bought whose orders the store does not
// hold, or the reverse: 201s and 202s against the orders written.
func (r opening) misled() int {
	w, _, _ := r.split()
	return max(len(w)-r.audit.Orders, r.audit.Orders-len(w))
}

// openedEarly counts the orders made before the opening, both on the
// service's clock: each is a sale the window let through early. (When a
// click left this machine says nothing: under load it reaches the service
// much later.)
func (r opening) openedEarly() int {
	n := 0
	for _, c := range r.clicks {
		if c.won() && c.at.Before(r.opens) {
			n++
		}
	}
	return n
}

// verdict is the opening's: the audit's, and UNSAFE when the store is
// exact but a buyer was misled or an order predates the opening. It judges
// the store and the answers that said bought, nothing else.
func (r opening) verdict() string {
	if r.audit.Verdict != api.VerdictOK {
		return r.audit.Verdict
	}
	if r.misled() != 0 || r.openedEarly() != 0 {
		return "UNSAFE"
	}
	return api.VerdictOK
}

// The opening report's tables' columns, each named in its legend.
var (
	openingAnswersHeader = append([]string{"opening", "clicks", "early"}, answerNames[:]...)
	openingFastHeader    = []string{"opening", "sold out", "won p50", "won p99", "refused p50", "refused p99", "early p50", "early p99"}
	openingFirstHeader   = []string{"opening", "due", "answered", "p50", "p99"}
	openingVerdictHeader = []string{"opening", "verdict", "initial", "remaining", "orders", "oversold", "lost upd", "misled", "before open"}
)

// printOpenings writes the openings' report: what the clicks were told,
// how fast, the first moments, the verdicts and who bought in what order,
// each table within reportWidth with a legend.
func printOpenings(out io.Writer, runs []opening) {
	answers := make([][]string, len(runs))
	fast := make([][]string, len(runs))
	first := make([][]string, len(runs))
	verdicts := make([][]string, len(runs))
	for i, r := range runs {
		t := r.answers()
		_, _, early := r.split()
		answers[i] = append([]string{r.name, itoa(len(r.clicks)), itoa(len(early))}, t.cells()...)
		fast[i] = r.fastCells()
		first[i] = r.firstCells()
		a := r.audit
		verdicts[i] = []string{r.name, r.verdict(), itoa(a.Initial), itoa(a.Remaining), itoa(a.Orders), itoa(a.Oversold),
			itoa(a.LostUpdates), itoa(r.misled()), itoa(r.openedEarly())}
	}
	writeTable(out, "what each opening's clicks were told", openingAnswersHeader, answers,
		append([]string{"clicks: the buyers' requests; early: those due before the opening (5% of buyers click once then too);"}, answerLegend...))
	for _, r := range runs {
		if t := r.answers(); t.failures() > 0 {
			fmt.Fprint(out, wrap("  "+r.name+", not meant: "+t.unmeantList()))
		}
	}
	writeTable(out, "how fast, in ms from each click's due time (open loop: a click waits for no other)",
		openingFastHeader, fast,
		[]string{"sold out: when the answer that sold the last unit came (- when units remain); won p50, won p99: the latency",
			"  of the clicks that bought; refused p50, refused p99: of the other clicks due after the opening; early p50,",
			"  early p99: of the clicks due before it"})
	writeTable(out, fmt.Sprintf("the first %s after the opening (warm against cold: a cold opening has no scripts loaded, no pools)", ms(openingFirst)),
		openingFirstHeader, first,
		[]string{"due: clicks due in it; answered: those answered within it; p50, p99: the latency of those due, in ms"})
	for _, r := range runs {
		if r.chilled != "" {
			fmt.Fprint(out, wrap("  "+r.name+" was made cold just before the opening: "+r.chilled))
		}
	}
	writeTable(out, "verdicts", openingVerdictHeader, verdicts,
		[]string{"verdict: the audit's (OK: the store is exact), UNSAFE if it is OK but misled or before open is not 0;",
			"  initial, remaining, orders, oversold, lost upd: the audit's units, orders, orders past the stock, overwritten takes;",
			"  misled: buyers told bought (201/202) less the orders, either way; before open: orders made before the opening.",
			"  The verdict judges the store and the bought answers only. A refusal, failed or no-answer click is counted above",
			"  and not judged: with misled 0, the orders are exactly the bought answers, so none of them sold a unit"})
	fmt.Fprintln(out, "\nwho bought, in click order (first come, first served would sell every unit to the earliest clicks)")
	for _, r := range runs {
		fmt.Fprint(out, wrap("  "+r.fairness()))
	}
}

// fastCells are the opening's row of the how-fast table.
func (r opening) fastCells() []string {
	winners, refused, early := r.split()
	soldOut := "-"
	if r.audit.Remaining == 0 && len(winners) > 0 {
		soldOut = cellMS(slices.MaxFunc(winners, func(a, b click) int { return int(a.done - b.done) }).done)
	}
	w50, w99 := quantiles(winners)
	r50, r99 := quantiles(refused)
	e50, e99 := quantiles(early)
	return []string{r.name, soldOut, w50, w99, r50, r99, e50, e99}
}

// firstCells are the opening's row of the first moments' table.
func (r opening) firstCells() []string {
	var due []click
	answered := 0
	for _, c := range r.clicks {
		if c.due >= 0 && c.due < openingFirst {
			due = append(due, c)
			if c.done < openingFirst {
				answered++
			}
		}
	}
	p50, p99 := quantiles(due)
	return []string{r.name, itoa(len(due)), itoa(answered), p50, p99}
}

// fairness says, in a few short sentences with numbers, who bought in
// what order: how many units the earliest clicks got, how far out of
// order the sale served, and whether anyone bought after a buyer had been
// told sold out.
func (r opening) fairness() string {
	var after []click // the clicks due after the opening, in click order
	won, wonEarly := 0, 0
	for _, c := range r.clicks {
		if c.due >= 0 {
			after = append(after, c)
		}
		if c.won() {
			won++
			if c.due < 0 {
				wonEarly++
			}
		}
	}
	if won == 0 {
		return r.name + ": nobody bought."
	}
	slices.SortStableFunc(after, func(a, b click) int { return int(a.due - b.due) })
	k := min(won, len(after))
	first := 0
	for _, c := range after[:k] {
		if c.won() {
			first++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d units sold. The first %d clicks (made by %s) bought %d of them; %d went to later clicks",
		r.name, won, k, ms(after[max(k-1, 0)].due), first, won-first-wonEarly)
	if wonEarly > 0 {
		fmt.Fprintf(&b, ", %d to clicks made before the opening that reached the service after it", wonEarly)
	}
	b.WriteString(".")
	var refusedFirst *click // the earliest click told sold out
	var toldAt time.Duration
	for i, c := range after {
		if c.code != api.CodeSoldOut {
			continue
		}
		if refusedFirst == nil {
			refusedFirst = &after[i]
		}
		if toldAt == 0 || c.done < toldAt {
			toldAt = c.done
		}
	}
	if refusedFirst == nil {
		b.WriteString(" Nobody was told sold out.")
		return b.String()
	}
	overtook, late := 0, 0
	for _, c := range after {
		if c.won() && c.due > refusedFirst.due {
			overtook++
		}
		if c.won() && c.due > toldAt {
			late++
		}
	}
	fmt.Fprintf(&b, " The earliest click told sold out was made at %s; %d units went to clicks made after it.", ms(refusedFirst.due), overtook)
	fmt.Fprintf(&b, " The first sold-out answer came at %s; %d units went to clicks made after that answer.", ms(toldAt), late)
	return b.String()
}

// wrap breaks s into lines of at most reportWidth columns, continuing
// them indented under its first, and ends it with a newline.
func wrap(s string) string {
	indent := strings.Repeat(" ", len(s)-len(strings.TrimLeft(s, " "))+2)
	var b strings.Builder
	line := ""
	for _, w := range strings.Fields(s) {
		switch {
		case line == "":
			line = indent[:len(indent)-2] + w
		case len([]rune(line))+1+len([]rune(w)) > reportWidth:
			b.WriteString(line + "\n")
			line = indent + w
		default:
			line += " " + w
		}
	}
	return b.String() + line + "\n"
}
