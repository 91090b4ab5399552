package harness

import (
	_ "embed"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"seckill/internal/api"
	"seckill/web"
)

// Report is the rows of one invocation with the machine they ran on.
type Report struct {
	Title   string    `json:"title"`
	Started time.Time `json:"started"`
	Machine Machine   `json:"machine"`
	Rows    []Row     `json:"rows"`
	// Summary lines, e.g. a scenario's throughput ratio.
	Summary []string `json:"summary,omitempty"`
	// Shares are each master's share of the purchase path's Redis work, by
	// cluster size, when a scenario measured them (the cluster scenario).
	Shares []MasterShares `json:"shares,omitempty"`
}

// MasterShares is one cluster size's split of the Redis work: the share of
// the commands and of the CPU each master served, in master order.
type MasterShares struct {
	Masters  int       `json:"masters"`
	Commands []float64 `json:"commands"`
	CPU      []float64 `json:"cpu"`
}

// Label names a row in tables and charts: strategy/mode, then what else
// tells rows of one report apart: instances, shards, hold, fallback off.
func (r Row) Label() string {
	s := r.Strategy + "/" + r.Mode
	if r.Instances > 1 {
		s += " ×" + strconv.Itoa(r.Instances)
	}
	if r.Shards > 0 {
		s += " " + strconv.Itoa(r.Shards) + "sh"
	}
	if r.Masters > 1 {
		s += " " + strconv.Itoa(r.Masters) + " masters"
	}
	if r.HoldMS > 0 {
		s += " hold " + strconv.FormatInt(r.HoldMS, 10) + "ms"
	}
	if r.Lifecycle != "" {
		s += " " + r.Lifecycle
	}
	if r.Fallback != nil && !*r.Fallback {
		s += " no-fallback"
	}
	if r.Fault != "" {
		s += " " + r.Fault
	}
	return s
}

// Expectation says what verdicts a row was expected to reach, and whether
// it did; nil when nothing was expected.
type Expectation struct {
	Want []string `json:"want"`
	Held bool     `json:"held"`
}

// Check records whether the row's verdict is one of want, with the harness
// and the audit in agreement. A SKIPPED row holds no expectation.
func (r *Row) Check(want ...string) bool {
	held := r.Agree && slices.Contains(want, r.Verdict)
	r.Expect = &Expectation{Want: want, Held: held}
	return held
}

// WriteJSON writes the report as indented JSON.
func (rep Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		return fmt.Errorf("writing the JSON report: %w", err)
	}
	return nil
}

// csvHeader is the CSV columns: the Row's JSON names.
var csvHeader = []string{
	"strategy", "mode", "instances", "stock", "shards", "fallback", "concurrency", "hold_ms",
	"requests", "ok", "sold_out", "already_bought", "errors", "sold", "oversold",
	"lost_updates", "undersold", "sold_out_early", "rps", "p50_ms", "p90_ms", "p99_ms", "max_ms",
	"lock_wait_p99_ms", "elapsed_s", "verdict", "harness_verdict", "audit_verdict",
	"agree", "expected", "held", "error_samples", "product_id", "buyers", "user_base",
}

// WriteCSV writes one line per row after a header of JSON field names; the
// machine goes into leading comment lines.
func (rep Report) WriteCSV(w io.Writer) error {
	for _, line := range rep.MachineLines() {
		if _, err := fmt.Fprintf(w, "# %s\n", line); err != nil {
			return fmt.Errorf("writing the CSV report: %w", err)
		}
	}
	cw := csv.NewWriter(w)
	_ = cw.Write(csvHeader) // errors are sticky: checked once by Error below
	itoa := strconv.Itoa
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	for _, r := range rep.Rows {
		want, held := "", ""
		if r.Expect != nil {
			want, held = strings.Join(r.Expect.Want, "|"), strconv.FormatBool(r.Expect.Held)
		}
		fallback := "" // the service's default
		if r.Fallback != nil {
			fallback = strconv.FormatBool(*r.Fallback)
		}
		_ = cw.Write([]string{
			r.Strategy, r.Mode, itoa(r.Instances), itoa(r.Stock), itoa(r.Shards), fallback, itoa(r.Concurrency),
			strconv.FormatInt(r.HoldMS, 10), itoa(r.Requests), itoa(r.OK), itoa(r.SoldOut),
			itoa(r.AlreadyBought), itoa(r.Errors), itoa(r.Sold), itoa(r.Oversold),
			itoa(r.LostUpdates), itoa(r.Undersold), itoa(r.SoldOutEarly), f(r.RPS), f(r.P50MS), f(r.P90MS), f(r.P99MS),
			f(r.MaxMS), f(r.LockWaitP99MS), f(r.ElapsedS), r.Verdict, r.HarnessVerdict,
			r.AuditVerdict, strconv.FormatBool(r.Agree), want, held, strings.Join(r.ErrorSamples, " | "),
			strconv.FormatInt(r.ProductID, 10), itoa(r.Buyers), strconv.FormatInt(r.UserBase, 10),
		})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("writing the CSV report: %w", err)
	}
	return nil
}

// MachineLines are the lines that head every report: title and time, the
// machine and commit, the service and its backends.
func (rep Report) MachineLines() []string {
	m := rep.Machine
	lines := []string{
		fmt.Sprintf("%s — %s", rep.Title, rep.Started.Format(time.RFC3339)),
		fmt.Sprintf("machine: %s, %d cores, %s, %s, commit %s", m.CPU, m.Cores, m.OS, m.Go, m.Commit),
		fmt.Sprintf("service: %s mode, redis %s, sql %s, %d instance(s) at %s", m.Service, m.Redis, m.SQL, m.Instances, m.Target),
	}
	if m.Note != "" {
		lines = append(lines, "note: "+m.Note)
	}
	return lines
}

// WriteTable writes the report for a terminal: the machine; three tables
// of one line per run, each within tableWidth columns (what the buyers
// were told, what the store and the orders say, how fast), with a legend
// of their columns; then the disagreements, error samples and summary.
func (rep Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	for _, line := range rep.MachineLines() {
		b.WriteString(line + "\n")
	}
	for _, t := range tables {
		b.WriteString("\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "run\t"+strings.Join(t.columns, "\t")+"\t")
		for _, r := range rep.Rows {
			fmt.Fprintln(tw, r.Label()+"\t"+strings.Join(t.cells(r), "\t")+"\t")
		}
		tw.Flush()
		b.WriteString(strings.Join(t.legend, "\n") + "\n")
	}
	b.WriteString("\n")
	rep.writeRemarks(&b)
	for _, s := range rep.Summary {
		b.WriteString(s + "\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}

// tableWidth is the most columns a table of WriteTable takes, its run
// label of up to 24 characters included.
const tableWidth = 120

// A table is one of WriteTable's: its columns, each row's cells, and the
// legend of the columns a reader might not guess.
type table struct {
	columns []string
	cells   func(Row) []string
	legend  []string // each column named, in lines that fit tableWidth
}

var tables = []table{
	{
		columns: []string{"reqs", "ok", "sold out", "bought", "errors"},
		cells: func(r Row) []string {
			return []string{itoa(r.Requests), itoa(r.OK), itoa(r.SoldOut), itoa(r.AlreadyBought), itoa(r.Errors)}
		},
		legend: []string{
			"what the buyers were told. reqs: purchases sent; ok: an order; sold out: sold out;",
			"  bought: already bought (one unit a buyer); errors: any other answer, or none",
		},
	},
	{
		columns: []string{"sold", "oversold", "lost upd", "undersold", "early", "verdict", "audit", "agree", "expected"},
		cells: func(r Row) []string {
			return []string{itoa(r.Sold), itoa(r.Oversold), itoa(r.LostUpdates), itoa(r.Undersold), itoa(r.SoldOutEarly),
				r.Verdict, r.AuditVerdict, agreement(r), expected(r)}
		},
		legend: []string{
			"what the store and the orders say. sold: orders written; oversold: orders past the stock;",
			"  lost upd: takes whose stock write another overwrote (those units sell again); undersold: units left unsold",
			"  while buyers were told sold out; early: sold outs told before a later purchase got an order;",
			"  verdict: the harness's, from what it was told; audit: the service's, from Redis and SQL;",
			"  agree: the two agree; expected: what the scenario expects (✓ held, ✗ did not)",
		},
	},
	{
		columns: []string{"req/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "lock p99 ms"},
		cells: func(r Row) []string {
			return []string{fmt.Sprintf("%.0f", r.RPS), cellMS(r.P50MS), cellMS(r.P90MS), cellMS(r.P99MS), cellMS(r.MaxMS), cellMS(r.LockWaitP99MS)}
		},
		legend: []string{
			"how fast. req/s: answers a second; p50 ms, p90 ms, p99 ms, max ms: a purchase's time, as the harness timed it;",
			"  lock p99 ms: the service's wait for its lock",
		},
	},
}

func itoa[T ~int | ~int64](n T) string { return strconv.FormatInt(int64(n), 10) }

func cellMS(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// expected is the expectation's cell: the verdicts wanted and whether one
// came.
func expected(r Row) string {
	if r.Expect == nil {
		return ""
	}
	exp := strings.Join(r.Expect.Want, "|")
	switch {
	case r.Verdict == Skipped:
		return exp + " (skipped)"
	case r.Expect.Held:
		return exp + " ✓"
	}
	return exp + " ✗"
}

// writeRemarks writes the rows' disagreements, notes and error samples,
// each distinct one once with the number of runs that had it: repeated
// runs on the same backend say the same things.
func (rep Report) writeRemarks(b *strings.Builder) {
	type remark struct{ kind, label, text string }
	var order []remark
	runs := make(map[remark]int)
	add := func(m remark) {
		if runs[m] == 0 {
			order = append(order, m)
		}
		runs[m]++
	}
	for _, r := range rep.Rows {
		for _, d := range r.Disagreements {
			add(remark{"disagreement", r.Label(), d})
		}
		if r.Note != "" {
			add(remark{"note", r.Label(), r.Note})
		}
		for _, s := range r.ErrorSamples {
			add(remark{"error", r.Label(), s})
		}
		if r.Timeline != nil {
			add(remark{"race", r.Label(), r.Timeline.Sentence})
		}
	}
	for _, m := range order {
		if n := runs[m]; n > 1 {
			fmt.Fprintf(b, "%s %s (%d runs): %s\n", m.kind, m.label, n, m.text)
		} else {
			fmt.Fprintf(b, "%s %s: %s\n", m.kind, m.label, m.text)
		}
	}
}

func agreement(r Row) string {
	switch {
	case r.Verdict == Skipped:
		return "—"
	case r.Agree:
		return "yes"
	}
	return "NO"
}

//go:embed assets/report.html.tmpl
var reportHTML string

var reportTmpl = template.Must(template.New("report").Parse(reportHTML))

// Chart is one bar chart of a metric per row.
type Chart struct {
	ID     string    `json:"id"`
	Title  string    `json:"title"`
	Unit   string    `json:"unit"`
	Labels []string  `json:"labels"`
	Values []float64 `json:"values"`
}

// Charts are the report's charts: throughput, p99 latency and oversold units.
func (rep Report) Charts() []Chart {
	charts := []Chart{
		{ID: "throughput", Title: "Throughput", Unit: "req/s"},
		{ID: "p99", Title: "p99 latency", Unit: "ms"},
		{ID: "oversold", Title: "Oversold units", Unit: "units"},
	}
	for _, r := range rep.Rows {
		for i, v := range []float64{r.RPS, r.P99MS, float64(r.Oversold)} {
			charts[i].Labels = append(charts[i].Labels, r.Label())
			charts[i].Values = append(charts[i].Values, v)
		}
	}
	return charts
}

// WriteHTML writes one self-contained page: the machine, the table and the
// charts, with the chart library and the data inlined.
func (rep Report) WriteHTML(w io.Writer) error {
	// By row, nil where a row has none; nil when no row has one.
	var timelines []*api.Timeline
	for i, r := range rep.Rows {
		if r.Timeline != nil && timelines == nil {
			timelines = make([]*api.Timeline, len(rep.Rows))
		}
		if timelines != nil {
			timelines[i] = r.Timeline
		}
	}
	data := struct {
		Report
		Lines      []string
		Charts     []Chart
		ChartJS    template.JS
		Timelines  []*api.Timeline
		TimelineJS template.JS
	}{rep, rep.MachineLines(), rep.Charts(), template.JS(web.ChartJS), timelines, template.JS(web.TimelineJS)}
	if err := reportTmpl.Execute(w, data); err != nil {
		return fmt.Errorf("writing the HTML report: %w", err)
	}
	return nil
}
