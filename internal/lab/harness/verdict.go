package harness

import (
	"fmt"

	"seckill/internal/api"
)

// Verdicts of a run, most severe first.
const (
	// Oversold: more orders than stock, or orders the stock counter never
	// counted as taken (lost updates: the counter will sell those units
	// again).
	Oversold = "OVERSOLD"
	// Lost: units left the stock and reached no order (a purchase that
	// died between its take and its order, until the reconciler returns
	// them).
	Lost = "LOST"
	// Undersold: units were left unsold while buyers were told "sold out".
	Undersold = "UNDERSOLD"
	// Errors: the stock is right but some requests failed (lock timeouts,
	// unavailable, transport errors).
	Errors = "ERRORS"
	// Safe: every unit sold at most once, none lost, no error.
	Safe = "SAFE"
	// Skipped: the service rejected the run's settings; nothing was sent.
	Skipped = "SKIPPED"
)

// severity orders the verdicts for worst().
var severity = map[string]int{Safe: 0, Errors: 1, Undersold: 2, Lost: 3, Oversold: 4}

func worst(a, b string) string {
	if severity[b] > severity[a] {
		return b
	}
	return a
}

// Tally is what the harness itself counted.
type Tally struct {
	Stock   int // the stock it reset the product to
	OK      int // 201s
	SoldOut int // 409 sold_out
	Errors  int // anything that is neither a sale nor a business refusal
	// Unknown counts the errors whose outcome the client cannot know (no
	// answer, or 503 outcome_unknown): each may be an order all the same.
	Unknown int
	// Checked: the run looked its 202s up once the queue drained, and
	// Missing of them were not in the table (dead letters among them).
	Checked bool
	Missing int
}

// unknownCodes are the error codes of requests whose outcome is unknown.
var unknownCodes = []string{"transport", "timeout", api.CodeOutcomeUnknown}

// Judgement is the verdict from both sides and whether they agree.
type Judgement struct {
	Oversold    int
	LostUpdates int
	Undersold   int
	// Harness is the verdict from the harness's own counts alone.
	Harness string
	// Audit is the verdict from the service's audit, with the sold-out and
	// error counts that only the harness sees.
	Audit string
	// Verdict is the worse of the two: a disagreement never hides a fault.
	Verdict string
	Agree   bool
	// Disagreements say what differs, empty when they agree.
	Disagreements []string
}

// classify applies the verdict rules to one side's numbers.
func classify(oversold, lostUpdates, undersold, errors int) string {
	switch {
	case oversold > 0 || lostUpdates > 0:
		return Oversold
	case lostUpdates < 0:
		return Lost
	case undersold > 0:
		return Undersold
	case errors > 0:
		return Errors
	}
	return Safe
}

// undersold is the stock left unsold while some buyer was told "sold out".
func undersold(t Tally, initial, sold int) int {
	if t.SoldOut == 0 {
		return 0
	}
	return max(0, initial-sold)
}

// orders is what the harness's counts say of the orders: at least the 201s,
// and at most those and the answers that never came.
func (t Tally) orders() (least, most int) { return t.OK, t.OK + t.Unknown }

// Judge computes the verdict of a run from the harness's tally and the
// service's audit. The two must tell the same story: every 201 is one order,
// the initial stock is the one the harness set, and the verdicts match.
func Judge(t Tally, a api.Audit) Judgement {
	least, most := t.orders()
	// A 202 whose order the database refused since is a dead letter, its
	// unit back on sale: the audit counts those.
	least = max(0, least-a.DeadLettered)
	if t.Checked {
		// Checked one by one: the harness knows which 202s came to
		// nothing, dead letters included.
		least, most = max(0, t.OK-t.Missing), max(0, most-t.Missing)
	}
	harness := classify(max(0, least-t.Stock), 0, undersold(t, t.Stock, most), t.Errors)
	audit := classify(a.Oversold, a.LostUpdates, undersold(t, a.Initial, a.Orders), t.Errors)
	j := Judgement{
		Oversold:    a.Oversold,
		LostUpdates: a.LostUpdates,
		Undersold:   undersold(t, a.Initial, a.Orders),
		Harness:     harness,
		Audit:       audit,
		Verdict:     worst(harness, audit),
	}
	// 202s that came to nothing beyond the dead letters: lost promises,
	// which an audit of what Redis holds now cannot see (it lost them).
	lostPromises := t.Missing - a.DeadLettered
	if lostPromises > 0 {
		j.Harness, j.Verdict = worst(harness, Lost), worst(j.Verdict, Lost)
		harness = j.Harness
	}
	if a.Initial != t.Stock {
		j.Disagreements = append(j.Disagreements,
			fmt.Sprintf("the audit's initial stock is %d, the harness set %d", a.Initial, t.Stock))
	}
	switch {
	case a.Orders < least || a.Orders > most && t.Unknown == 0:
		msg := fmt.Sprintf("the harness counted %d orders created (201), the audit found %d", t.OK, a.Orders)
		if a.DeadLettered > 0 {
			msg += fmt.Sprintf(" and %d dead letters", a.DeadLettered)
		}
		j.Disagreements = append(j.Disagreements, msg)
	case a.Orders > most:
		j.Disagreements = append(j.Disagreements,
			fmt.Sprintf("the harness counted %d orders created (201) and %d answers that never came, the audit found %d orders", t.OK, t.Unknown, a.Orders))
	}
	if a.LostUpdates > 0 && harness != Oversold {
		j.Disagreements = append(j.Disagreements,
			fmt.Sprintf("the audit found %d lost updates that the harness cannot see from its counts", a.LostUpdates))
	}
	// Units lost with the purchases that failed: the harness saw them fail
	// and cannot see whether they had taken a unit. The audit can.
	explained := audit == Lost && -a.LostUpdates <= t.Errors && severity[harness] < severity[Lost] ||
		lostPromises > 0 && harness == Lost && severity[audit] < severity[Lost]
	if harness != audit && !explained {
		j.Disagreements = append(j.Disagreements,
			fmt.Sprintf("verdict from the harness's counts is %s, from the audit %s", harness, audit))
	}
	j.Agree = len(j.Disagreements) == 0
	return j
}
