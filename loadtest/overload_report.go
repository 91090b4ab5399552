package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"seckill/internal/api"
)

// expected reports an answer item 7 allows: an order, a refusal the service
// meant (409, 429), or shedding.
func (a ask) expected() bool {
	switch {
	case a.err != nil:
		return false
	case a.sold(), a.shed():
		return true
	default:
		return a.status == http.StatusConflict || a.status == http.StatusTooManyRequests
	}
}

// floodStats is what one flood's asks say.
type floodStats struct {
	sold, shed, unexpected int
	admitted, sales, shedL []time.Duration // latencies from the due time
	lag                    []time.Duration // sent less due: the harness's own delay
	answers                map[string]int
}

func (f *flood) stats() floodStats {
	st := floodStats{answers: make(map[string]int)}
	for _, a := range f.asks {
		st.lag = append(st.lag, a.sent-a.due)
		switch {
		case a.err != nil:
			st.answers["transport error"]++
		case a.code != "":
			st.answers[fmt.Sprintf("%d %s", a.status, a.code)]++
		default:
			st.answers[fmt.Sprintf("%d", a.status)]++
		}
		if !a.expected() {
			st.unexpected++
		}
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
	return float64(st.sold) / f.span.Seconds() / capacity
}

func (f *flood) print(out io.Writer, capacity float64) floodStats {
	st := f.stats()
	fmt.Fprintf(out, "\nflood %s: %d asks at %.0f/s for %s, the last answered after %s\n", f.name, len(f.asks), f.rate, f.d, f.span.Round(time.Millisecond))
	fmt.Fprintf(out, "  admitted %6d  %s (from each ask's due time)\n", len(st.admitted), durations(st.admitted))
	fmt.Fprintf(out, "  sales    %6d  %s\n", st.sold, durations(st.sales))
	fmt.Fprintf(out, "  shed     %6d  %s (503 overloaded)\n", st.shed, durations(st.shedL))
	fmt.Fprintf(out, "  harness lag (sent less due) %s\n", durations(st.lag))
	if len(f.limits) > 0 {
		l := slices.Clone(f.limits)
		slices.Sort(l)
		fmt.Fprintf(out, "  the limit, every %s: min %.0f, median %.0f, max %.0f\n", overloadSampling, l[0], l[len(l)/2], l[len(l)-1])
	}
	names := make([]string, 0, len(st.answers))
	for k := range st.answers {
		names = append(names, k)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s × %d", k, st.answers[k])
	}
	fmt.Fprintf(out, "  answers: %s\n", strings.Join(parts, ", "))
	fmt.Fprintf(out, "  goodput %.0f sales/s = %.2f × capacity\n", float64(st.sold)/f.span.Seconds(), f.goodput(st, capacity))
	return st
}

// judgeOverload prints each flood, the audit of the shelf and item 7's
// targets, met or missed. Only an unsafe store is an error: a missed
// target is a measurement.
func judgeOverload(out io.Writer, capacity float64, floods []*flood, audits []api.Audit, s *shelf) error {
	stats := make([]floodStats, len(floods))
	for i, f := range floods {
		stats[i] = f.print(out, capacity)
	}
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
	fmt.Fprintf(out, "\nverdict %s: %d products, initial %d, remaining %d, orders %d, oversold %d, lost updates %d; %d not exact; %d buyers misled\n",
		verdict, len(audits), initial, remaining, orders, oversold, lost, unsafe, misled)
	for i, f := range floods {
		st := stats[i]
		fmt.Fprintf(out, "targets, %s: admitted p99 %s (≤ %s: %s); unexpected answers %d (none: %s); goodput %.2f (≥ %.2f: %s); verdict %s\n",
			f.name, ms(quantile(st.admitted, 0.99)), overloadP99, met(quantile(st.admitted, 0.99) <= overloadP99),
			st.unexpected, met(st.unexpected == 0), f.goodput(st, capacity), overloadGoodput, met(f.goodput(st, capacity) >= overloadGoodput), verdict)
	}
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
