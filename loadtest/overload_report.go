package main

import (
	"fmt"
	"io"
	"slices"
	"time"

	"seckill/internal/api"
)

// floodStats is what one flood's asks say.
type floodStats struct {
	sold, shed             int
	admitted, sales, shedL []time.Duration // latencies from the due time
	lag                    []time.Duration // sent less due: the harness's own delay
	answers                tally
}

func (f *flood) stats() floodStats {
	var st floodStats
	for _, a := range f.asks {
		st.lag = append(st.lag, a.sent-a.due)
		st.answers.add(a.status, a.code, a.err)
		switch {
		case a.shed():
			st.shed++
			st.shedL = append(st.shedL, a.latency())
		case a.err == nil:
			st.admitted = append(st.admitted, a.latency())
			if a.sold() {
				st.sold++
				st.sales = append(st.sales, a.latency())
			}
		}
	}
	return st
}

// goodput is the flood's sales a second, from its first due time to its
// last answer, over the capacity.
func (f *flood) goodput(st floodStats, capacity float64) float64 {
	return f.salesRate(st) / capacity
}

// salesRate is the flood's sales a second over its span; 0 for a flood
// that never ran.
func (f *flood) salesRate(st floodStats) float64 {
	if f.span <= 0 {
		return 0
	}
	return float64(st.sold) / f.span.Seconds()
}

// The overload report's tables' columns, each named in its legend.
var (
	overloadAnswersHeader = append([]string{"flood", "asks"}, answerNames[:]...)
	overloadFastHeader    = []string{"flood", "admit p50", "admit p99", "sale p50", "sale p99", "shed p50", "shed p99", "lag p50", "lag p99", "limit"}
	overloadTargetsHeader = []string{"flood", "span s", "sales/s", "goodput", fmt.Sprintf("goodput ≥ %.2f", overloadGoodput), "admit p99",
		fmt.Sprintf("p99 ≤ %d ms", overloadP99.Milliseconds()), "not meant", "none"}
	overloadAuditHeader = []string{"products", "initial", "remaining", "orders", "oversold", "lost upd", "not exact", "misled", "verdict"}
)

// p50p99 are the two cells of ds's p50 and p99, in ms.
func p50p99(ds []time.Duration) []string {
	if len(ds) == 0 {
		return []string{"-", "-"}
	}
	return []string{cellMS(quantile(ds, 0.50)), cellMS(quantile(ds, 0.99))}
}

// limitCell is the limit's min/median/max over the flood, "-" without one.
func (f *flood) limitCell() string {
	if len(f.limits) == 0 {
		return "-"
	}
	l := slices.Clone(f.limits)
	slices.Sort(l)
	return fmt.Sprintf("%.0f/%.0f/%.0f", l[0], l[len(l)/2], l[len(l)-1])
}

// judgeOverload prints what each flood's asks were told, how fast, item
// 7's targets met or missed, and the audit of the shelf, each table within
// reportWidth with its legend. Only an unsafe store is an error: a missed
// target is a measurement.
func judgeOverload(out io.Writer, capacity float64, floods []*flood, audits []api.Audit, s *shelf) error {
	if len(floods) == 0 {
		return fmt.Errorf("overload: no flood ran: %w", errExpectation)
	}
	var answers, fast, targets [][]string
	for _, f := range floods {
		st := f.stats()
		answers = append(answers, append([]string{f.name, itoa(len(f.asks))}, st.answers.cells()...))
		row := []string{f.name}
		for _, ds := range [][]time.Duration{st.admitted, st.sales, st.shedL, st.lag} {
			row = append(row, p50p99(ds)...)
		}
		fast = append(fast, append(row, f.limitCell()))
		// A flood that admitted nobody has no p99 to meet its target with.
		p99, p99Met := "-", met(false)
		if len(st.admitted) > 0 {
			q := quantile(st.admitted, 0.99)
			p99, p99Met = cellMS(q), met(q <= overloadP99)
		}
		good := f.goodput(st, capacity)
		targets = append(targets, []string{f.name, fmt.Sprintf("%.1f", f.span.Seconds()), fmt.Sprintf("%.0f", f.salesRate(st)),
			fmt.Sprintf("%.2f", good), met(good >= overloadGoodput), p99, p99Met,
			itoa(st.answers.failures()), met(st.answers.failures() == 0)})
	}
	writeTable(out, "what each flood's asks were told", overloadAnswersHeader, answers,
		append([]string{fmt.Sprintf("asks: purchases sent, %.0f a second, each at its due time whatever the others' answers;", floods[0].rate)}, answerLegend...))
	for _, f := range floods {
		if st := f.stats(); st.answers.failures() > 0 {
			fmt.Fprint(out, wrap("  "+f.name+", not meant: "+st.answers.unmeantList()))
		}
	}
	writeTable(out, "how fast, in ms from each ask's due time", overloadFastHeader, fast,
		[]string{"admit p50, admit p99: asks the service let in (every answer but shed and no answer); sale p50, sale p99: those",
			"  that bought; shed p50, shed p99: those shed; lag p50, lag p99: when an ask left less its due time, the harness's",
			fmt.Sprintf("  own delay; limit: the concurrency limit's min/median/max, read every %s (- without one)", overloadSampling)})
	writeTable(out, "issue 21's targets (item 7), met or missed", overloadTargetsHeader, targets,
		[]string{"span s: from the first due time to the last answer; sales/s: bought over span s; goodput: sales/s ÷ the capacity,",
			fmt.Sprintf("  goodput ≥ %.2f: its target; admit p99: as above, p99 ≤ %d ms: its target; not meant: failed, no answer and",
				overloadGoodput, overloadP99.Milliseconds()),
			"  other answers (the only answers item 7 allows are 201, 202, 409, 429 and 503 overloaded), none: its target"})
	return judgeShelf(out, audits, s)
}

// judgeShelf prints the audit of every product of the shelf, and is an
// error when a product is not exact or a buyer was misled.
func judgeShelf(out io.Writer, audits []api.Audit, s *shelf) error {
	var initial, remaining, orders, oversold, lost, unsafe, misled int
	for _, a := range audits {
		initial += a.Initial
		remaining += a.Remaining
		orders += a.Orders
		oversold += a.Oversold
		lost += a.LostUpdates
		if a.Verdict != api.VerdictOK {
			unsafe++
		}
		told := s.told[a.ProductID]
		misled += max(told-a.Orders, a.Orders-told)
	}
	verdict := api.VerdictOK
	if unsafe > 0 || misled > 0 {
		verdict = "UNSAFE"
	}
	writeTable(out, "the shelf's audit, both floods and the closed loop", overloadAuditHeader,
		[][]string{{itoa(len(audits)), itoa(initial), itoa(remaining), itoa(orders), itoa(oversold), itoa(lost), itoa(unsafe), itoa(misled), verdict}},
		[]string{"products: the shelf's, each with a unit a buyer; initial, remaining, orders, oversold, lost upd: their audits' sums;",
			"  not exact: products whose audit is not OK; misled: buyers told bought less the orders, either way, product by",
			"  product; verdict: OK when not exact and misled are 0. It judges the store and the bought answers only: the",
			"  targets above are measurements, and a missed one does not fail the run"})
	if verdict != api.VerdictOK {
		return fmt.Errorf("overload: %d products not exact, %d buyers misled: %w", unsafe, misled, errExpectation)
	}
	return nil
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}
