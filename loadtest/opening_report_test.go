package main

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"seckill/internal/api"
)

// madeUpOpening is an opening of 3 units and 11 clicks, one of each
// answer the herd can get.
func madeUpOpening(name string, orders int) opening {
	c := func(due, done time.Duration, status int, code string, err error) click {
		return click{due: due, done: done, status: status, code: code, err: err}
	}
	msec := time.Millisecond
	clicks := []click{
		c(-5*msec, 1*msec, http.StatusConflict, api.CodeNotStarted, nil),
		c(1*msec, 30*msec, http.StatusConflict, api.CodeSoldOut, nil),
		c(2*msec, 20*msec, http.StatusCreated, "", nil),
		c(3*msec, 21*msec, http.StatusCreated, "", nil),
		c(4*msec, 22*msec, http.StatusAccepted, "", nil),
		c(5*msec, 40*msec, http.StatusConflict, api.CodeSoldOut, nil),
		c(6*msec, 41*msec, http.StatusServiceUnavailable, api.CodeUnavailable, nil),
		c(7*msec, 42*msec, http.StatusServiceUnavailable, api.CodeUnavailable, nil),
		c(8*msec, 43*msec, http.StatusInternalServerError, api.CodeInternal, nil),
		c(9*msec, 44*msec, 0, "", fmt.Errorf("posting: %w", syscall.ECONNRESET)),
		c(10*msec, 45*msec, http.StatusUnauthorized, api.CodeUnauthorized, nil),
	}
	return opening{name: name, clicks: clicks, stock: 3,
		audit: api.Audit{Verdict: api.VerdictOK, Initial: 3, Orders: orders, Remaining: 3 - orders}}
}

// Issue 41: the report said "errors 1372" and then "verdict OK". Every
// click is now counted under a named answer, the ones the service did not
// mean are listed by status and code, and the verdict says what it judges.
func TestOpeningReportNamesEveryAnswer(t *testing.T) {
	var out strings.Builder
	printOpenings(&out, []opening{madeUpOpening("warm", 3)})
	report := out.String()
	//               clicks early bought sold out not open already refused shed failed no answer other
	row := "warm  11  1  3  2  1  0  0  0  3  1  1"
	if !strings.Contains(strings.Join(strings.Fields(report), "  "), row) {
		t.Errorf("the answers' row is not %q:\n%s", row, report)
	}
	for _, want := range []string{
		"warm, not meant: 503 unavailable × 2, 401 unauthorized × 1, 500 internal × 1, no answer (connection reset) × 1",
		"The verdict judges the store and the bought answers only",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "errors") {
		t.Errorf("the report counts errors without naming them:\n%s", report)
	}
}

// An opening whose store is exact but told a buyer bought that the store
// has no order for is not OK.
func TestOpeningVerdictCountsMisledBuyers(t *testing.T) {
	if v := madeUpOpening("warm", 3).verdict(); v != api.VerdictOK {
		t.Errorf("3 bought, 3 orders: verdict %s, want OK", v)
	}
	r := madeUpOpening("warm", 2)
	if v := r.verdict(); v != "UNSAFE" {
		t.Errorf("3 bought, 2 orders: verdict %s, want UNSAFE", v)
	}
	var out strings.Builder
	printOpenings(&out, []opening{r})
	if strings.Contains(out.String(), "verdict OK") || !strings.Contains(strings.Join(strings.Fields(out.String()), " "), "warm UNSAFE 3 1 2 0 0 1 0") {
		t.Errorf("the verdicts' table does not say UNSAFE with 1 misled:\n%s", out.String())
	}
}

// The fairness sentence says who bought in what order, with numbers.
func TestOpeningFairnessSaysWhoBoughtInWhatOrder(t *testing.T) {
	got := madeUpOpening("warm", 3).fairness()
	want := "warm: 3 units sold. The first 3 clicks (made by 3.0 ms) bought 2 of them; 1 went to later clicks." +
		" The earliest click told sold out was made at 1.0 ms; 3 units went to clicks made after it." +
		" The first sold-out answer came at 30.0 ms; 0 units went to clicks made after that answer."
	if got != want {
		t.Errorf("fairness:\n got %s\nwant %s", got, want)
	}
}

// Every line of the opening's report fits 120 columns, with the longest
// name and large counts, and every column of its tables is named in the
// legend under it.
func TestOpeningReportFitsAndSaysWhatItsColumnsAre(t *testing.T) {
	big := madeUpOpening("warm, no fallback", 3)
	for i := range big.clicks {
		big.clicks[i].done *= 10_000
	}
	for range 100_000 {
		big.clicks = append(big.clicks, big.clicks[1])
	}
	big.chilled = "scripts flushed; the service's Redis connections kept (ERR unknown command 'client', with args beginning with: 'kill')"
	var out strings.Builder
	printOpenings(&out, []opening{madeUpOpening("warm", 3), big})
	checkFitsAndExplained(t, out.String(), openingAnswersHeader, openingFastHeader, openingFirstHeader, openingVerdictHeader)
}
