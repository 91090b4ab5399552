package main

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"seckill/internal/api"
)

// madeUpFlood is a flood of asks with every kind of answer, one product a
// unit each.
func madeUpFlood(name string, limit int) *flood {
	msec := time.Millisecond
	a := func(due, done time.Duration, status int, code string, err error) ask {
		return ask{due: due, sent: due + msec, done: done, status: status, code: code, err: err}
	}
	return &flood{name: name, limit: limit, rate: 300, d: time.Second, span: 1200 * msec, limits: []float64{1, 4, 2},
		asks: []ask{
			a(0, 10*msec, http.StatusCreated, "", nil),
			a(1*msec, 250*msec, http.StatusAccepted, "", nil),
			a(2*msec, 5*msec, http.StatusServiceUnavailable, api.CodeOverloaded, nil),
			a(3*msec, 8*msec, http.StatusConflict, api.CodeSoldOut, nil),
			a(4*msec, 9*msec, http.StatusTooManyRequests, api.CodeRateLimited, nil),
			a(5*msec, 30*msec, http.StatusServiceUnavailable, api.CodeUnavailable, nil),
			a(6*msec, 2000*msec, 0, "", fmt.Errorf("posting: %w", syscall.ECONNRESET)),
		}}
}

// tableRows are the rows of the report's table under title, by their
// first cell: cells are apart by two spaces or more, as writeTable aligns
// them.
func tableRows(t *testing.T, report, title string) map[string][]string {
	t.Helper()
	_, rest, ok := strings.Cut(report, "\n"+title+"\n")
	if !ok {
		t.Fatalf("the report has no table %q:\n%s", title, report)
	}
	gap := regexp.MustCompile(`\s{2,}`)
	rows := make(map[string][]string)
	for i, line := range strings.Split(rest, "\n") {
		if i == 0 {
			continue // the header
		}
		if !strings.HasPrefix(line, "  ") || strings.TrimSpace(line) == "" {
			break // the legend, or the next table
		}
		cells := gap.Split(strings.TrimSpace(line), -1)
		rows[cells[0]] = cells[1:]
	}
	return rows
}

// checkFitsAndExplained fails t when a line of report is wider than
// reportWidth, or a column of headers (but the first, the row's name) is
// not named in a legend ("col:" or "col,").
func checkFitsAndExplained(t *testing.T, report string, headers ...[]string) {
	t.Helper()
	for i, l := range strings.Split(report, "\n") {
		if n := utf8.RuneCountInString(l); n > reportWidth {
			t.Errorf("line %d is %d columns wide, more than %d: %q", i+1, n, reportWidth, l)
		}
	}
	for _, header := range headers {
		for _, col := range header[1:] {
			if !strings.Contains(report, col+":") && !strings.Contains(report, col+",") {
				t.Errorf("column %q is not in a legend:\n%s", col, report)
			}
		}
	}
}

// Issue 41: the overload report's lines ran past 120 columns and its
// counts had no legend. Every line now fits, every column is named in a
// legend, the answers the service did not mean are listed, and the shelf's
// verdict fails the run only when the store is wrong.
func TestOverloadReportFitsAndSaysWhatItsColumnsAre(t *testing.T) {
	floods := []*flood{madeUpFlood("limit 1", 1), madeUpFlood("no limit", 0)}
	floods[1].limits = nil
	audits := []api.Audit{{ProductID: 1, Verdict: api.VerdictOK, Initial: 2, Orders: 2}, {ProductID: 2, Verdict: api.VerdictOK, Initial: 2, Orders: 2}}
	s := &shelf{told: map[int64]int{1: 2, 2: 2}}
	var out strings.Builder
	if err := judgeOverload(&out, 100, floods, audits, s); err != nil {
		t.Fatalf("an exact shelf judged %v", err)
	}
	report := out.String()
	checkFitsAndExplained(t, report, overloadAnswersHeader, overloadFastHeader, overloadTargetsHeader, overloadAuditHeader)
	answers := tableRows(t, report, "what each flood's asks were told")
	// asks, bought, sold out, not open, already, refused, shed, failed, no answer, other
	if got, want := strings.Join(answers["limit 1"], " "), "7 2 1 0 0 1 1 1 1 0"; got != want {
		t.Errorf("limit 1's answers: %s, want %s\n%s", got, want, report)
	}
	if !strings.Contains(report, "limit 1, not meant: ") || !strings.Contains(report, "503 unavailable") {
		t.Errorf("the answers not meant are not listed:\n%s", report)
	}
	fast := tableRows(t, report, "how fast, in ms from each ask's due time")
	if got := fast["limit 1"]; len(got) != 9 || got[8] != "1/2/4" {
		t.Errorf("limit 1's speeds %q, want 8 latencies and the limit 1/2/4\n%s", got, report)
	}
	if got := fast["no limit"]; len(got) != 9 || got[8] != "-" {
		t.Errorf("no limit's speeds %q, want the limit -\n%s", got, report)
	}
	targets := tableRows(t, report, "issue 21's targets (item 7), met or missed")
	// span s, sales/s, goodput, goodput ≥ 0.80, admit p99, p99 ≤ 200 ms, not meant, none
	if got, want := strings.Join(targets["limit 1"], " "), "1.2 2 0.02 missed"; !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "2 missed") {
		t.Errorf("limit 1's targets: %s, want %s … 2 missed\n%s", got, want, report)
	}
	audit := tableRows(t, report, "the shelf's audit, both floods and the closed loop")
	if got, want := strings.Join(audit["2"], " "), "4 0 4 0 0 0 0 OK"; got != want {
		t.Errorf("the audit: %s, want %s\n%s", got, want, report)
	}

	// A flood that admitted nobody has no p99: it misses its target.
	shedAll := madeUpFlood("shed all", 1)
	shedAll.asks = shedAll.asks[2:3] // one 503 overloaded
	out.Reset()
	if err := judgeOverload(&out, 100, []*flood{shedAll}, audits, s); err != nil {
		t.Fatal(err)
	}
	if got := tableRows(t, out.String(), "issue 21's targets (item 7), met or missed")["shed all"]; len(got) != 8 || got[4] != "-" || got[5] != "missed" {
		t.Errorf("a flood that admitted nobody: targets %q, want admit p99 - and missed\n%s", got, out.String())
	}

	// A buyer told bought whose order is not there fails the run.
	s.told[2] = 3
	out.Reset()
	if err := judgeOverload(&out, 100, floods, audits, s); !errors.Is(err, errExpectation) {
		t.Errorf("a misled buyer judged %v, want %v", err, errExpectation)
	}
	if got := strings.Join(tableRows(t, out.String(), "the shelf's audit, both floods and the closed loop")["2"], " "); got != "4 0 4 0 0 0 1 UNSAFE" {
		t.Errorf("the audit with a misled buyer: %s, want … 1 UNSAFE", got)
	}
}
