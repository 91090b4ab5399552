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

// ms prints a duration in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// quantiles are the p50 and p99 of the clicks' latencies.
func quantiles(cs []click) string {
	l := make([]time.Duration, len(cs))
	for i, c := range cs {
		l[i] = c.latency()
	}
	return durations(l)
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
func (r opening) split() (winners, refused, early []click, codes map[string]int) {
	codes = make(map[string]int)
	for _, c := range r.clicks {
		switch {
		case c.won():
			winners = append(winners, c)
		case c.due < 0:
			early = append(early, c)
		default:
			refused = append(refused, c)
		}
		switch {
		case c.err != nil:
			codes["transport error"]++
		case c.code != "":
			codes[c.code]++
		default:
			codes[http.StatusText(c.status)]++
		}
	}
	return winners, refused, early, codes
}

// soldOutAt is when the first buyer was told sold out, after the opening;
// false if nobody was.
func (r opening) soldOutAt() (time.Duration, bool) {
	first, found := time.Duration(0), false
	for _, c := range r.clicks {
		if c.code == api.CodeSoldOut && (!found || c.done < first) {
			first, found = c.done, true
		}
	}
	return first, found
}

// soldOutDue orders clicks refused sold out by their due time, others last.
func soldOutDue(c click) time.Duration {
	if c.code != api.CodeSoldOut {
		return time.Duration(1<<63 - 1)
	}
	return c.due
}

// misled counts buyers told they bought whose orders the store does not
// hold, or the reverse: 201s and 202s against the orders written.
func (r opening) misled() int {
	w, _, _, _ := r.split()
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

func (r opening) print(out io.Writer) {
	winners, refused, early, codes := r.split()
	fmt.Fprintf(out, "\nopening %s: %d clicks (%d early), %d units, %d buyers told they bought\n",
		r.name, len(r.clicks), len(early), r.stock, len(winners))
	if r.chilled != "" {
		fmt.Fprintf(out, "  made cold just before: %s\n", r.chilled)
	}
	if r.audit.Remaining == 0 && len(winners) > 0 {
		last := slices.MaxFunc(winners, func(a, b click) int { return int(a.done - b.done) })
		fmt.Fprintf(out, "  sold out %s after the opening (the last unit's answer)\n", ms(last.done))
	} else {
		fmt.Fprintf(out, "  not sold out: %d units remain\n", r.audit.Remaining)
	}
	notStarted := 0
	for _, c := range early {
		if c.code == api.CodeNotStarted {
			notStarted++
		}
	}
	fmt.Fprintf(out, "  winners  %6d  %s\n  refusals %6d  %s\n  early    %6d  %s; %d told not_started\n",
		len(winners), quantiles(winners), len(refused), quantiles(refused), len(early), quantiles(early), notStarted)
	names := make([]string, 0, len(codes))
	for k := range codes {
		names = append(names, k)
	}
	sort.Strings(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s %d", k, codes[k]))
	}
	fmt.Fprintf(out, "  answers: %s\n", strings.Join(parts, ", "))
	fmt.Fprintf(out, "  shed (503 overloaded) %d, errors %d\n", codes[api.CodeOverloaded], r.errors())
	if at, ok := r.soldOutAt(); ok {
		late := 0
		for _, c := range winners {
			if c.due > at {
				late++
			}
		}
		fmt.Fprintf(out, "  fairness: the first buyer was told sold out at %s; %d units went to buyers who clicked after that\n", ms(at), late)
		first := slices.MinFunc(r.clicks, func(a, b click) int { return int(soldOutDue(a) - soldOutDue(b)) })
		passed := 0
		for _, c := range winners {
			if c.due > first.due {
				passed++
			}
		}
		fmt.Fprintf(out, "  and %d units to buyers who clicked after the first buyer refused sold out had clicked (at %s)\n", passed, ms(first.due))
	}
	fmt.Fprintf(out, "  verdict %s (audit: initial %d, remaining %d, orders %d, oversold %d, lost updates %d; %d buyers misled)\n",
		r.audit.Verdict, r.audit.Initial, r.audit.Remaining, r.audit.Orders, r.audit.Oversold, r.audit.LostUpdates, r.misled())
}

// errors counts the clicks answered with neither an order nor a refusal
// the service meant: transport errors and 5xx other than shedding.
func (r opening) errors() int {
	n := 0
	for _, c := range r.clicks {
		if c.err != nil || c.status >= 500 && c.code != api.CodeOverloaded {
			n++
		}
	}
	return n
}

// printFirst compares the first moments of the warm and the cold opening.
func printFirst(out io.Writer, warm, cold opening) {
	fmt.Fprintf(out, "\nthe first %s after the opening, warm against cold:\n", ms(openingFirst))
	for _, r := range []opening{warm, cold} {
		var due, answered []click
		for _, c := range r.clicks {
			if c.due >= 0 && c.due < openingFirst {
				due = append(due, c)
				if c.done < openingFirst {
					answered = append(answered, c)
				}
			}
		}
		fmt.Fprintf(out, "  %-5s %5d clicks due, %5d answered within it; latency of those due: %s\n",
			r.name, len(due), len(answered), quantiles(due))
	}
}
