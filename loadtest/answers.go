package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"

	"seckill/internal/api"
)

// The classes of answer the opening and overload reports count: every
// answer falls in exactly one, so a table of them adds up to the requests
// sent, and a verdict can say which it judges (issue 41, finding 4).
const (
	answerBought = iota
	answerSoldOut
	answerNotOpen
	answerAlready
	answerRefused
	answerShed
	answerFailed
	answerNoAnswer
	answerOther
	answerClasses
)

// answerNames are the classes' column names; answerLegend says what each
// holds, in the reports' legends.
var (
	answerNames  = [answerClasses]string{"bought", "sold out", "not open", "already", "refused", "shed", "failed", "no answer", "other"}
	answerLegend = []string{
		"bought: 201 or 202, an order made or queued; sold out: 409 sold_out; not open: 409 not_started, clicked before",
		"  the opening; already: 409 already_bought, the buyer's other click bought; refused: another 409, or 429",
		"  rate_limited; shed: 503 overloaded, refused at once by the concurrency limit, before the stock;",
		"  failed: another 5xx, the service could not finish (unavailable, lock_timeout, outcome_unknown, internal …);",
		"  no answer: no HTTP answer (connection refused or reset, timeout); other: any other answer (400, 401, 403 …).",
		"  bought to shed are answers the service means; failed, no answer and other are not",
	}
)

// classify names what one request was told: its status, its error code,
// and the error of a request that got no answer.
func classify(status int, code string, err error) int {
	switch {
	case status == http.StatusCreated || status == http.StatusAccepted:
		return answerBought
	case err != nil:
		return answerNoAnswer
	case status == http.StatusConflict && code == api.CodeSoldOut:
		return answerSoldOut
	case status == http.StatusConflict && code == api.CodeNotStarted:
		return answerNotOpen
	case status == http.StatusConflict && code == api.CodeAlreadyBought:
		return answerAlready
	case status == http.StatusConflict || status == http.StatusTooManyRequests:
		return answerRefused
	case status == http.StatusServiceUnavailable && code == api.CodeOverloaded:
		return answerShed
	case status >= 500:
		return answerFailed
	default:
		return answerOther
	}
}

// tally counts answers by class, and those the service did not mean by
// what they were, so that a report can name them.
type tally struct {
	n       [answerClasses]int
	unmeant map[string]int
}

func (t *tally) add(status int, code string, err error) {
	c := classify(status, code, err)
	t.n[c]++
	if c < answerFailed {
		return
	}
	if t.unmeant == nil {
		t.unmeant = make(map[string]int)
	}
	what := strings.TrimSpace(fmt.Sprintf("%d %s", status, code))
	if c == answerNoAnswer {
		what = "no answer (" + transportCause(err) + ")"
	}
	t.unmeant[what]++
}

// failures counts the answers the service did not mean.
func (t tally) failures() int { return t.n[answerFailed] + t.n[answerNoAnswer] + t.n[answerOther] }

// cells are the classes' counts, as the tables show them.
func (t tally) cells() []string {
	out := make([]string, answerClasses)
	for i, n := range t.n {
		out[i] = itoa(n)
	}
	return out
}

// unmeantList names the answers the service did not mean, most first:
// "503 unavailable × 1200, no answer (connection reset) × 3".
func (t tally) unmeantList() string {
	names := make([]string, 0, len(t.unmeant))
	for k := range t.unmeant {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		if t.unmeant[names[i]] != t.unmeant[names[j]] {
			return t.unmeant[names[i]] > t.unmeant[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, k := range names {
		parts[i] = fmt.Sprintf("%s × %d", k, t.unmeant[k])
	}
	return strings.Join(parts, ", ")
}

// transportCause is a request's failure in a few words, without the
// addresses that would make every one different.
func transportCause(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	}
	var te interface{ Timeout() bool }
	if errors.As(err, &te) && te.Timeout() {
		return "timeout"
	}
	return "other transport error"
}

// reportWidth is the most columns a line of the opening's and overload's
// reports takes, as the harness's tables (issue 41).
const reportWidth = 120

// writeTable writes a table of rows under its header, each cell aligned
// right, then its legend.
func writeTable(out io.Writer, title string, header []string, rows [][]string, legend []string) {
	fmt.Fprintf(out, "\n%s\n", title)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	tw.Flush()
	for _, l := range legend {
		fmt.Fprintln(out, l)
	}
}
