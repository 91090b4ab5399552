package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"golang.org/x/net/html"

	"seckill/internal/api"
)

func TestJudge(t *testing.T) {
	audit := func(initial, remaining, orders int) api.Audit {
		return api.Audit{Initial: initial, Remaining: remaining, Orders: orders,
			Oversold: max(0, orders-initial), LostUpdates: orders - (initial - remaining)}
	}
	tests := []struct {
		name  string
		tally Tally
		audit api.Audit
		want  Judgement
	}{{
		name:  "every unit sold once",
		tally: Tally{Stock: 10, OK: 10, SoldOut: 5},
		audit: audit(10, 0, 10),
		want:  Judgement{Harness: Safe, Audit: Safe, Verdict: Safe, Agree: true},
	}, {
		name:  "oversold, seen by both",
		tally: Tally{Stock: 10, OK: 13, SoldOut: 7},
		audit: audit(10, 0, 13),
		want:  Judgement{Oversold: 3, LostUpdates: 3, Harness: Oversold, Audit: Oversold, Verdict: Oversold, Agree: true},
	}, {
		name:  "lost updates before the stock ran out: only the audit sees them",
		tally: Tally{Stock: 10, OK: 6},
		audit: audit(10, 6, 6),
		want: Judgement{LostUpdates: 2, Harness: Safe, Audit: Oversold, Verdict: Oversold, Disagreements: []string{
			"the audit found 2 lost updates that the harness cannot see from its counts",
			"verdict from the harness's counts is SAFE, from the audit OVERSOLD",
		}},
	}, {
		name:  "sold out told while units remain",
		tally: Tally{Stock: 10, OK: 8, SoldOut: 4},
		audit: audit(10, 2, 8),
		want:  Judgement{Undersold: 2, Harness: Undersold, Audit: Undersold, Verdict: Undersold, Agree: true},
	}, {
		name:  "units taken without an order, nobody told sold out",
		tally: Tally{Stock: 10, OK: 8, Errors: 2},
		audit: audit(10, 0, 8),
		want:  Judgement{LostUpdates: -2, Harness: Errors, Audit: Lost, Verdict: Lost, Agree: true},
	}, {
		name:  "more units without an order than purchases failed",
		tally: Tally{Stock: 10, OK: 7, Errors: 1},
		audit: audit(10, 0, 7),
		want: Judgement{LostUpdates: -3, Harness: Errors, Audit: Lost, Verdict: Lost, Disagreements: []string{
			"verdict from the harness's counts is ERRORS, from the audit LOST",
		}},
	}, {
		name:  "two 202s dead-lettered, their units back: counted by the audit",
		tally: Tally{Stock: 10, OK: 10},
		audit: func() api.Audit { a := audit(10, 2, 8); a.DeadLettered = 2; return a }(),
		want:  Judgement{Harness: Safe, Audit: Safe, Verdict: Safe, Agree: true},
	}, {
		name:  "two 202s without their rows, and no dead letter",
		tally: Tally{Stock: 10, OK: 10},
		audit: audit(10, 2, 8),
		want: Judgement{Harness: Safe, Audit: Safe, Verdict: Safe, Disagreements: []string{
			"the harness counted 10 orders created (201), the audit found 8",
		}},
	}, {
		name:  "202s checked: 3 never reached the table, which the audit of what Redis kept cannot see",
		tally: Tally{Stock: 10, OK: 10, Checked: true, Missing: 3},
		audit: audit(10, 3, 7),
		want:  Judgement{Harness: Lost, Audit: Safe, Verdict: Lost, Agree: true},
	}, {
		name:  "errors, stock right",
		tally: Tally{Stock: 10, OK: 4, Errors: 26},
		audit: audit(10, 6, 4),
		want:  Judgement{Harness: Errors, Audit: Errors, Verdict: Errors, Agree: true},
	}, {
		name:  "an order the harness never saw answered",
		tally: Tally{Stock: 10, OK: 9, Errors: 1, SoldOut: 3},
		audit: audit(10, 0, 10),
		want: Judgement{Harness: Undersold, Audit: Errors, Verdict: Undersold, Disagreements: []string{
			"the harness counted 9 orders created (201), the audit found 10",
			"verdict from the harness's counts is UNDERSOLD, from the audit ERRORS",
		}},
	}, {
		name:  "answers that never came, some of them orders",
		tally: Tally{Stock: 10, OK: 6, Errors: 4, Unknown: 3},
		audit: audit(10, 2, 8),
		want:  Judgement{Harness: Errors, Audit: Errors, Verdict: Errors, Agree: true},
	}, {
		name:  "more orders than 201s and answers that never came",
		tally: Tally{Stock: 10, OK: 6, Errors: 1, Unknown: 1},
		audit: audit(10, 2, 8),
		want: Judgement{Harness: Errors, Audit: Errors, Verdict: Errors, Disagreements: []string{
			"the harness counted 6 orders created (201) and 1 answers that never came, the audit found 8 orders",
		}},
	}, {
		name:  "the audit speaks of another stock",
		tally: Tally{Stock: 10, OK: 10, SoldOut: 1},
		audit: audit(20, 10, 10),
		want: Judgement{Undersold: 10, Harness: Safe, Audit: Undersold, Verdict: Undersold, Disagreements: []string{
			"the audit's initial stock is 20, the harness set 10",
			"verdict from the harness's counts is SAFE, from the audit UNDERSOLD",
		}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Judge(tt.tally, tt.audit)); diff != "" {
				t.Errorf("Judge(%+v, %+v) (-want +got):\n%s", tt.tally, tt.audit, diff)
			}
		})
	}
}

func TestRunAgainstFake(t *testing.T) {
	srv := newFakeService(t)
	tests := []struct {
		lock string
		want string
	}{{"none", Oversold}, {"token", Safe}}
	for i, tt := range tests {
		t.Run(tt.lock, func(t *testing.T) {
			spec := Spec{
				Targets: []string{srv.URL}, ProductID: int64(100 + i), Lock: tt.lock,
				Stock: 20, Buyers: 150, Requests: 200, Concurrency: 40, Hold: Duration(2 * time.Millisecond),
			}
			var calls int
			row, err := Run(t.Context(), spec, func(Progress) { calls++ })
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if row.Verdict != tt.want || !row.Agree {
				t.Fatalf("verdict %s (harness %s, audit %s, agree %v: %v), want %s",
					row.Verdict, row.HarnessVerdict, row.AuditVerdict, row.Agree, row.Disagreements, tt.want)
			}
			// Requests 150–199 repeat users 1–50: those who bought are told so.
			if row.Requests != 200 || row.AlreadyBought == 0 || row.OK+row.SoldOut+row.AlreadyBought != 200 || row.Errors != 0 || row.Sold != row.OK {
				t.Errorf("requests %d, ok %d, sold out %d, already bought %d, errors %d, sold %d: want 200 answered without error, some repeats, sold = ok",
					row.Requests, row.OK, row.SoldOut, row.AlreadyBought, row.Errors, row.Sold)
			}
			if tt.want == Safe && row.OK != spec.Stock {
				t.Errorf("ok %d, want the whole stock %d", row.OK, spec.Stock)
			}
			if calls == 0 || row.P50MS <= 0 || row.MaxMS < row.P99MS || row.RPS <= 0 {
				t.Errorf("progress calls %d, p50 %v, p99 %v, max %v, rps %v: want a final progress call and filled latencies",
					calls, row.P50MS, row.P99MS, row.MaxMS, row.RPS)
			}
		})
	}
}

// The fake sells a buyer one unit at most whatever the lock, as the real
// service does: buyers racing themselves are the harness's repeats, and a
// second 201 for one order made its count and the audit's disagree.
func TestFakeSellsABuyerOnce(t *testing.T) {
	srv := newFakeService(t)
	for i, lock := range fakeLocks {
		t.Run(lock, func(t *testing.T) {
			product := int64(300 + i)
			post(t, srv.URL+"/api/products", api.ProductRequest{ID: &product, Stock: ptr(100), Lock: lock}, http.StatusOK)
			user := int64(1)
			in := api.OrderRequest{UserID: &user, ProductID: &product, Lock: lock, HoldMS: 20}
			start := make(chan struct{})
			var created atomic.Int64
			var wg sync.WaitGroup
			for range 20 {
				wg.Go(func() {
					<-start
					if post(t, srv.URL+"/api/orders", in, http.StatusCreated, http.StatusConflict) == http.StatusCreated {
						created.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			if n := created.Load(); n != 1 {
				t.Errorf("one buyer's 20 purchases at once: %d created, want 1", n)
			}
		})
	}
}

// post sends v as JSON and returns the answer's status, which must be one
// of want.
func post(t *testing.T, url string, v any, want ...int) int {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Error(err)
		return 0
	}
	resp, err := http.Post(url, api.MediaType, bytes.NewReader(b))
	if err != nil {
		t.Error(err)
		return 0
	}
	defer resp.Body.Close()
	if !slices.Contains(want, resp.StatusCode) {
		body, _ := io.ReadAll(resp.Body)
		t.Errorf("POST %s: %d %s, want one of %v", url, resp.StatusCode, body, want)
	}
	return resp.StatusCode
}

func ptr[T any](v T) *T { return &v }

func TestRunRejected(t *testing.T) {
	srv := newFakeService(t)
	row, err := Run(t.Context(), Spec{Targets: []string{srv.URL}, Lock: "no-such-lock", Requests: 5}, nil)
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("Run with an unknown lock: err = %v, want ErrRejected", err)
	}
	if row.Verdict != Skipped || !strings.Contains(row.Note, "400") || row.Requests != 0 {
		t.Errorf("row %+v: want SKIPPED with the 400 in the note and nothing sent", row)
	}
}

// A strategy the service refuses is refused alike in every repeat, on its
// own product each time: the table says so once, with the count.
func TestRepeatedNotesPrintedOnce(t *testing.T) {
	srv := newFakeService(t)
	var rep Report
	for p := range int64(3) {
		row, _ := Run(t.Context(), Spec{Targets: []string{srv.URL}, ProductID: 10 + p, Lock: "no-such-lock", Requests: 5}, nil)
		rep.Rows = append(rep.Rows, row)
	}
	var table strings.Builder
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(table.String(), "note no-such-lock/rmw"); n != 1 {
		t.Errorf("the note is printed %d times, want once:\n%s", n, table.String())
	}
	if !strings.Contains(table.String(), "note no-such-lock/rmw (3 runs): resetting the product: ") {
		t.Errorf("the table does not count the runs behind the note:\n%s", table.String())
	}
}

func TestOpenLoopSendsRateTimesDuration(t *testing.T) {
	srv := newFakeService(t)
	spec := Spec{Targets: []string{srv.URL}, ProductID: 7, Lock: "token", Stock: 1000, Buyers: 1000,
		Rate: 400, Duration: Duration(250 * time.Millisecond), Concurrency: 10}
	row, err := Run(t.Context(), spec, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if row.Requests != 100 || row.OK != 100 || row.Verdict != Safe {
		t.Errorf("requests %d, ok %d, verdict %s: want 100 (400/s × 250ms), all sold, SAFE", row.Requests, row.OK, row.Verdict)
	}
}

func TestTimeoutStopsTheRun(t *testing.T) {
	srv := newFakeService(t)
	spec := Spec{Targets: []string{srv.URL}, ProductID: 8, Lock: "token", Stock: 1000, Buyers: 1000,
		Concurrency: 2, Hold: Duration(50 * time.Millisecond), Timeout: Duration(300 * time.Millisecond)}
	row, err := Run(t.Context(), spec, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if !row.TimedOut || row.Requests >= 1000 || row.Note == "" {
		t.Errorf("timed out %v after %d requests (note %q): want the run cut short and said so", row.TimedOut, row.Requests, row.Note)
	}
}

func sampleReport() Report {
	rows := []Row{
		{RunResult: api.RunResult{Strategy: "none", Mode: "rmw", Instances: 1, Stock: 100, Requests: 1000, OK: 140, SoldOut: 860, Sold: 140,
			Oversold: 40, LostUpdates: 40, RPS: 5321.5, P50MS: 2.1, P90MS: 3.3, P99MS: 7.9, MaxMS: 12,
			Verdict: Oversold, HarnessVerdict: Oversold, AuditVerdict: Oversold, ServiceVerdict: "OVERSOLD", Agree: true,
			ErrorCodes: map[string]int{}}, Expect: &Expectation{Want: []string{Oversold}, Held: true}},
		{RunResult: api.RunResult{Strategy: "token", Mode: "rmw", Instances: 3, Shards: 5, Stock: 100, Requests: 1000, OK: 100, SoldOut: 899, Errors: 1,
			Sold: 100, RPS: 2100, P50MS: 9, P90MS: 20, P99MS: 41.25, MaxMS: 80, LockWaitP99MS: 30,
			Verdict: Errors, AuditVerdict: Errors, Agree: true, ErrorCodes: map[string]int{"lock_timeout": 1},
			ErrorSamples: []string{`503 lock_timeout: <lock> "not" obtained`}}},
	}
	return Report{
		Title: "seckill load test", Started: time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC), Rows: rows,
		Machine: Machine{CPU: "Test CPU", Cores: 2, OS: "linux/amd64", Go: "go1.26", Commit: "abc1234",
			Service: "embedded", Redis: "7.2", SQL: "sqlite 3", Instances: 1, Target: "http://127.0.0.1:1"},
		Summary: []string{"throughput ratio 2.00×"},
	}
}

func TestReportJSONRoundTrips(t *testing.T) {
	rep := sampleReport()
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("decoding the report: %v\n%s", err, buf.String())
	}
	if diff := cmp.Diff(rep, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("JSON round trip (-wrote +read):\n%s", diff)
	}
	for _, field := range []string{"strategy", "mode", "instances", "requests", "ok", "sold_out", "errors", "sold",
		"oversold", "lost_updates", "undersold", "rps", "p50_ms", "p90_ms", "p99_ms", "max_ms",
		"lock_wait_p99_ms", "verdict", "audit_verdict", "agree", "error_samples"} {
		if !strings.Contains(buf.String(), `"`+field+`":`) {
			t.Errorf("the JSON report lacks the field %q the web page reads", field)
		}
	}
}

func TestSpecJSONRoundTrips(t *testing.T) {
	in := `{"targets":["http://x"],"stock":5,"lock":"token","hold":"300ms","duration":"2s","rate":50}`
	var s Spec
	if err := json.Unmarshal([]byte(in), &s); err != nil {
		t.Fatal(err)
	}
	if s.Hold != Duration(300*time.Millisecond) || s.Duration != Duration(2*time.Second) {
		t.Errorf("hold %v, duration %v: want 300ms and 2s", time.Duration(s.Hold), time.Duration(s.Duration))
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back Spec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, back); diff != "" {
		t.Errorf("Spec JSON round trip (-before +after):\n%s", diff)
	}
}

func TestReportHTMLCarriesItsCharts(t *testing.T) {
	rep := sampleReport()
	var buf bytes.Buffer
	if err := rep.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("parsing the report: %v", err)
	}
	var canvases []string
	var chartsJSON, scripts string
	var rows int
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "canvas":
				if c := attr(n, "data-chart"); c != "" { // curves have their own test
					canvases = append(canvases, c)
				}
			case "script":
				if src := attr(n, "src"); src != "" {
					t.Errorf("the report fetches %s: it must be self-contained", src)
				}
				if n.FirstChild != nil {
					if attr(n, "id") == "charts-data" {
						chartsJSON = n.FirstChild.Data
					}
					scripts += n.FirstChild.Data
				}
			case "link":
				t.Errorf("the report links %s: it must be self-contained", attr(n, "href"))
			case "tr":
				rows++
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if diff := cmp.Diff([]string{"throughput", "p99", "oversold"}, canvases); diff != "" {
		t.Errorf("canvases (-want +got):\n%s", diff)
	}
	if !strings.Contains(scripts, "Chart.js v4") {
		t.Error("the chart library is not inlined")
	}
	if rows != 1+len(rep.Rows) {
		t.Errorf("%d table rows, want a header and %d", rows, len(rep.Rows))
	}
	var charts []Chart
	if err := json.Unmarshal([]byte(chartsJSON), &charts); err != nil {
		t.Fatalf("decoding the charts' data: %v\n%s", err, chartsJSON)
	}
	if diff := cmp.Diff(rep.Charts(), charts); diff != "" {
		t.Errorf("charts' data (-want +got):\n%s", diff)
	}
	for _, c := range charts {
		if len(c.Values) != len(rep.Rows) || c.Values[0] == 0 {
			t.Errorf("chart %s carries %v: want one nonzero value per row", c.ID, c.Values)
		}
	}
	if !strings.Contains(buf.String(), "Test CPU") || !strings.Contains(buf.String(), "abc1234") {
		t.Error("the report does not state the machine and commit")
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func TestReportCSVAndTable(t *testing.T) {
	rep := sampleReport()
	var csvBuf, table bytes.Buffer
	if err := rep.WriteCSV(&csvBuf); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	var data []string
	for _, l := range strings.Split(strings.TrimSpace(csvBuf.String()), "\n") {
		if !strings.HasPrefix(l, "#") {
			data = append(data, l)
		}
	}
	if len(data) != 1+len(rep.Rows) || !strings.HasPrefix(data[0], "strategy,mode,instances") {
		t.Errorf("CSV lines %q: want a header and one line per row", data)
	}
	for _, want := range []string{"OVERSOLD ✓", "Test CPU", "lock_timeout", "throughput ratio"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, table.String())
		}
	}
}

// The workers' own connections must follow HTTP/1.1 as net/http would: a
// chunked answer, and an answer that closes the connection, followed by a
// fresh dial.
func TestConnSpeaksHTTP11(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		switch n.Add(1) % 3 {
		case 0:
			w.Header().Set("Connection", "close")
		case 1:
			w.WriteHeader(http.StatusCreated)
			w.(http.Flusher).Flush() // no Content-Length: chunked
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"1"}`)
	}))
	t.Cleanup(srv.Close)
	row, err := Drive(t.Context(), Spec{Targets: []string{srv.URL}, Requests: 300, Concurrency: 4}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if row.OK != 300 || row.Errors != 0 {
		t.Errorf("ok %d, errors %d (%v): want 300 created, no error", row.OK, row.Errors, row.ErrorSamples)
	}
}

func TestRunScenarioRepeats(t *testing.T) {
	srv := newFakeService(t)
	sc := Scenario{Name: "twice", Steps: []Step{{
		Spec:     Spec{Mode: "rmw", Stock: 10, Buyers: 60, Concurrency: 20, Hold: Duration(2 * time.Millisecond)},
		AllLocks: true,
		Expect: func(lock string) []string {
			if lock == "none" {
				return []string{Oversold}
			}
			return []string{Safe}
		},
	}}}
	rows, summary, held, err := RunScenario(t.Context(), sc, ScenarioRun{Targets: []string{srv.URL}, ProductID: 500, Repeat: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !held {
		t.Errorf("expectations not held: %v", summary)
	}
	var got []string
	products := make(map[int64]bool)
	for _, r := range rows {
		got = append(got, r.Strategy+" "+r.Verdict)
		products[r.ProductID] = true
	}
	want := []string{"none OVERSOLD", "token SAFE", "none OVERSOLD", "token SAFE", "none OVERSOLD", "token SAFE"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if len(products) != len(rows) {
		t.Errorf("%d rows on %d products: want a fresh product per run", len(rows), len(products))
	}
	if len(summary) != 2 || !strings.HasPrefix(summary[0], "none/rmw hold 2ms: 3 runs: OVERSOLD 3; oversold units ") ||
		!strings.HasSuffix(summary[0], "; expectation held 3/3") ||
		summary[1] != "token/rmw hold 2ms: 3 runs: SAFE 3; oversold units 0; expectation held 3/3" {
		t.Errorf("summary %q: want the verdicts of each strategy counted over the 3 runs", summary)
	}
}

func TestVerdictCounts(t *testing.T) {
	no := false
	rows := []Row{
		{RunResult: api.RunResult{Strategy: "token", Mode: "rmw", Shards: 5, Fallback: &no, Verdict: Undersold}, Expect: &Expectation{Held: true}},
		{RunResult: api.RunResult{Strategy: "none", Mode: "rmw", Verdict: Oversold, Oversold: 4}},
		{RunResult: api.RunResult{Strategy: "token", Mode: "rmw", Shards: 5, Fallback: &no, Verdict: Safe}, Expect: &Expectation{}},
		{RunResult: api.RunResult{Strategy: "none", Mode: "rmw", Verdict: Oversold, Oversold: 3}},
		{RunResult: api.RunResult{Strategy: "token", Mode: "rmw", Shards: 5, Fallback: &no, Verdict: Skipped}, Expect: &Expectation{}},
	}
	want := []string{
		"token/rmw 5sh no-fallback: 3 runs: SAFE 1, UNDERSOLD 1, SKIPPED 1; oversold units 0; expectation held 1/2",
		"none/rmw: 2 runs: OVERSOLD 2; oversold units 7",
	}
	if diff := cmp.Diff(want, VerdictCounts(rows)); diff != "" {
		t.Errorf("VerdictCounts (-want +got):\n%s", diff)
	}
}

func TestShardingRatiosPerHold(t *testing.T) {
	rows := []Row{
		{RunResult: api.RunResult{Shards: 1, RPS: 1000, Verdict: Safe}}, {RunResult: api.RunResult{Shards: 5, RPS: 1500, Verdict: Safe}},
		{RunResult: api.RunResult{Shards: 1, HoldMS: 1, RPS: 500, Verdict: Safe}}, {RunResult: api.RunResult{Shards: 5, HoldMS: 1, RPS: 2000, Verdict: Safe}},
		{RunResult: api.RunResult{Shards: 1, RPS: 1200, Verdict: Safe}}, {RunResult: api.RunResult{Shards: 5, RPS: 1800, Verdict: Safe}},
		{RunResult: api.RunResult{Shards: 1, RPS: 800, Verdict: Safe}}, {RunResult: api.RunResult{Shards: 5, RPS: 1000, Verdict: Safe}},
	}
	got := shardingRatios(rows)
	if len(got) != 2 ||
		!strings.HasPrefix(got[0], "hold 0ms: 5 shards / 1 shard = 1.50× (median 1500 vs 1000 req/s over 3 run(s) each) — not lock-bound") ||
		!strings.HasPrefix(got[1], "hold 1ms: 5 shards / 1 shard = 4.00× (median 2000 vs 500 req/s over 1 run(s) each) — lock-bound") {
		t.Errorf("ratios %q: want the median ratio at each hold, labelled", got)
	}
}

// A "sold out" answered before a later sale's request was sent is counted as
// early; one answered after the last sale is not.
func TestSoldOutEarly(t *testing.T) {
	for _, tt := range []struct {
		name    string
		answers []int // by request, in order
		want    int
	}{
		{"refused, then a later buyer served", []int{http.StatusCreated, http.StatusConflict, http.StatusConflict, http.StatusCreated}, 2},
		{"refused only after the last sale", []int{http.StatusCreated, http.StatusCreated, http.StatusConflict}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if status := tt.answers[n.Add(1)-1]; status == http.StatusConflict {
					fail(w, status, "sold_out")
					return
				}
				writeJSON(w, http.StatusCreated, map[string]string{"id": "1"})
			}))
			t.Cleanup(srv.Close)
			// One worker: each request is sent after the previous answer.
			row, err := Drive(t.Context(), Spec{Targets: []string{srv.URL}, Requests: len(tt.answers), Concurrency: 1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if row.SoldOutEarly != tt.want {
				t.Errorf("sold out early %d, want %d (row %+v)", row.SoldOutEarly, tt.want, row)
			}
		})
	}
}

// fakeInjector records the faults it is asked to strike.
type fakeInjector struct {
	answeredAt []int64 // requests answered when each Inject began
	load       *atomic.Int64
	healed     int
}

func (f *fakeInjector) Check(Fault) error { return nil }

func (f *fakeInjector) Inject(ctx context.Context, _ Fault) error {
	f.answeredAt = append(f.answeredAt, f.load.Load())
	return nil
}

func (f *fakeInjector) Heal(context.Context) error {
	f.healed++
	return nil
}

// A step's fault strikes once, after the answers it waits for and before
// the run ends; the runner heals after. Without an injector the run is
// SKIPPED, saying why.
func TestScenarioFaults(t *testing.T) {
	srv := newFakeService(t)
	var answered atomic.Int64
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		srv.Config.Handler.ServeHTTP(rec, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
		if r.URL.Path == "/api/orders" {
			answered.Add(1)
		}
	}))
	t.Cleanup(counting.Close)
	sc := Scenario{Name: "fault", Steps: []Step{{
		Spec:   Spec{Lock: "token", Mode: "rmw", Stock: 10, Buyers: 50, Concurrency: 5},
		Fault:  &Fault{Action: PauseInstance, Instance: 0, For: time.Millisecond, After: 20},
		Expect: always(Safe),
	}}}
	inj := &fakeInjector{load: &answered}
	rows, _, held, err := RunScenario(t.Context(), sc, ScenarioRun{Targets: []string{counting.URL}, ProductID: 700, Faults: inj})
	if err != nil || !held || len(rows) != 1 {
		t.Fatalf("rows %+v, held %v, err %v", rows, held, err)
	}
	if len(inj.answeredAt) != 1 || inj.answeredAt[0] < 20 || inj.answeredAt[0] >= 50 || inj.healed != 1 {
		t.Errorf("struck after %v answers, healed %d times: want once, after 20 answers and before the last, then healed",
			inj.answeredAt, inj.healed)
	}
	if rows[0].Note != "instance 0 paused for 1ms" {
		t.Errorf("note %q: want the fault named", rows[0].Note)
	}

	rows, _, held, err = RunScenario(t.Context(), sc, ScenarioRun{Targets: []string{counting.URL}, ProductID: 800})
	if err != nil || !held || len(rows) != 1 || rows[0].Verdict != Skipped || !strings.Contains(rows[0].Note, "-target") {
		t.Errorf("without an injector: rows %+v, held %v, err %v; want the run SKIPPED, saying why", rows, held, err)
	}
}

// A fault that counts its own instance's answers strikes after that many
// of them, whatever the other instances answered: with one worker the
// requests alternate, so after 3 answers in all instance 1 had answered 1.
func TestFaultAfterOwnAnswers(t *testing.T) {
	srv := newFakeService(t)
	var answered [2]atomic.Int64
	targets := make([]string, 2)
	for i := range answered {
		counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := httptest.NewRecorder()
			srv.Config.Handler.ServeHTTP(rec, r)
			maps.Copy(w.Header(), rec.Header())
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			if r.URL.Path == "/api/orders" {
				answered[i].Add(1)
			}
		}))
		t.Cleanup(counting.Close)
		targets[i] = counting.URL
	}
	sc := Scenario{Name: "own", Steps: []Step{{
		Spec:   Spec{Lock: "token", Mode: "rmw", Stock: 10, Buyers: 20, Concurrency: 1},
		Fault:  &Fault{Action: PauseInstance, Instance: 1, For: time.Millisecond, After: 3, AfterOwn: true},
		Expect: always(Safe),
	}}}
	inj := &fakeInjector{load: &answered[1]}
	rows, _, held, err := RunScenario(t.Context(), sc, ScenarioRun{Targets: targets, ProductID: 900, Faults: inj})
	if err != nil || !held || len(rows) != 1 {
		t.Fatalf("rows %+v, held %v, err %v", rows, held, err)
	}
	if len(inj.answeredAt) != 1 || inj.answeredAt[0] < 3 {
		t.Errorf("struck when instance 1 had answered %v: want once, after its 3rd answer", inj.answeredAt)
	}
}

// Across checks a step's runs together: it fails when too few reach its
// verdicts, and a step whose every run was SKIPPED is not checked.
func TestAcrossCheck(t *testing.T) {
	rows := func(verdicts ...string) []Row {
		var rs []Row
		for _, v := range verdicts {
			rs = append(rs, Row{RunResult: api.RunResult{Strategy: "watchdog", Mode: "rmw", Verdict: v}})
		}
		return rs
	}
	a := Across{Verdicts: []string{Oversold}, AtLeast: 1}
	for _, tt := range []struct {
		name                  string
		rows                  []Row
		reached, runs         int
		wantHeld, wantChecked bool
	}{
		{"never oversold", rows(Safe, Errors, Safe), 0, 3, false, true},
		{"oversold once", rows(Safe, Oversold, Safe), 1, 3, true, true},
		{"skipped aside", rows(Skipped, Safe, Skipped), 0, 1, false, true},
		{"all skipped", rows(Skipped, Skipped), 0, 0, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reached, runs, held, checked := a.Check(tt.rows)
			if reached != tt.reached || runs != tt.runs || held != tt.wantHeld && checked || checked != tt.wantChecked {
				t.Errorf("Check = %d of %d, held %v, checked %v; want %d of %d, held %v, checked %v",
					reached, runs, held, checked, tt.reached, tt.runs, tt.wantHeld, tt.wantChecked)
			}
		})
	}
}

// A step that runs several times is checked across its runs: the fake's
// token never oversells, so a step that demands it in at least one of its
// runs fails the scenario, while none's, which always does, holds.
func TestRunScenarioAcrossRuns(t *testing.T) {
	srv := newFakeService(t)
	oversells := &Across{Verdicts: []string{Oversold}, AtLeast: 1}
	spec := Spec{Mode: "rmw", Stock: 10, Buyers: 60, Concurrency: 20, Hold: Duration(2 * time.Millisecond)}
	step := func(lock string) Step {
		s := spec
		s.Lock = lock
		return Step{Spec: s, Runs: 3, Expect: always(anyVerdict...), Across: oversells}
	}
	for _, tt := range []struct {
		lock     string
		wantHeld bool
	}{{"none", true}, {"token", false}} {
		t.Run(tt.lock, func(t *testing.T) {
			sc := Scenario{Name: "across", Steps: []Step{step(tt.lock)}}
			rows, summary, held, err := RunScenario(t.Context(), sc, ScenarioRun{Targets: []string{srv.URL}, ProductID: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 3 {
				t.Fatalf("%d rows, want the step's 3 runs", len(rows))
			}
			status := map[bool]string{true: "held", false: "NOT HELD"}[tt.wantHeld]
			last := summary[len(summary)-1]
			if held != tt.wantHeld || !strings.HasPrefix(last, "across the runs of "+tt.lock+"/rmw") || !strings.HasSuffix(last, status) {
				t.Errorf("held %v, summary %q: want held %v, said in its last line", held, summary, tt.wantHeld)
			}
		})
	}
}

// pauseHolds applies the pause scenario's checks, each run's and across
// its runs, to rows that reach the given verdicts, by lock, in turn.
func pauseHolds(t *testing.T, verdicts map[string][]string) bool {
	t.Helper()
	sc, err := LookupScenario("pause")
	if err != nil {
		t.Fatal(err)
	}
	runs, groups := sc.expand(nil)
	held := true
	var rows []Row
	next := make(map[string]int)
	for _, p := range runs {
		l := p.spec.Lock
		r := Row{RunResult: api.RunResult{Strategy: l, Mode: p.spec.Mode, Verdict: verdicts[l][next[l]%len(verdicts[l])], Agree: true}}
		next[l]++
		held = r.Check(p.expect...) && held
		rows = append(rows, r)
	}
	lines, across := checkAcross(runs, groups, rows)
	t.Log(strings.Join(lines, "\n"))
	return held && across
}

// The pause scenario's checks can fail: a watchdog or a token lock that
// never oversold across the runs (its lease somehow kept under the pause,
// or the pause missing the holder) fails it, as does a fenced run that
// oversold once; what the pause does to each lock passes.
func TestPauseScenarioChecksCanFail(t *testing.T) {
	for _, tt := range []struct {
		name     string
		verdicts map[string][]string
		want     bool
	}{
		{"the flaw shown", map[string][]string{"token": {Oversold}, "watchdog": {Safe, Errors, Oversold}, "fenced": {Errors, Safe}}, true},
		{"watchdog never oversold", map[string][]string{"token": {Oversold}, "watchdog": {Safe, Errors}, "fenced": {Errors}}, false},
		{"token never oversold", map[string][]string{"token": {Safe}, "watchdog": {Oversold}, "fenced": {Errors}}, false},
		{"fenced oversold once", map[string][]string{"token": {Oversold}, "watchdog": {Oversold}, "fenced": {Errors, Errors, Oversold}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := pauseHolds(t, tt.verdicts); got != tt.want {
				t.Errorf("the checks held: %v, want %v", got, tt.want)
			}
		})
	}
}

// The async-durability scenario's everysec kill may lose a second's 202s
// or none, but a run that sold a unit twice or stranded one fails it: the
// row's check can fail.
func TestEverysecKillRowCanFail(t *testing.T) {
	sc, err := LookupScenario("async-durability")
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(sc.Steps, func(s Step) bool {
		return s.Fault != nil && s.Fault.Action == KillRedis && s.Fault.Persistence == "everysec"
	})
	if i < 0 {
		t.Fatal("no everysec kill among the steps")
	}
	st := sc.Steps[i]
	for _, v := range []string{Safe, Errors, Lost, Oversold, Undersold} {
		r := Row{RunResult: api.RunResult{Strategy: st.Spec.Lock, Mode: st.Spec.Mode, Verdict: v, Agree: true}}
		if got, want := r.Check(st.Expect(st.Spec.Lock)...), v != Oversold && v != Undersold; got != want {
			t.Errorf("a %s run: held %v, want %v", v, got, want)
		}
	}
}

// Signed-in buyers' requests carry their tokens, each in turn, and a body
// that names the product alone: a user_id would stand for the token.
func TestSignedBuyersSendTheirTokens(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{} // "<Authorization> <body>" → requests
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen[r.Header.Get("Authorization")+" "+string(b)]++
		mu.Unlock()
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(api.Error{Code: api.CodeSoldOut, Error: "sold out"})
	}))
	t.Cleanup(srv.Close)
	signed := []api.Session{{BuyerID: 1 << 50, Token: "tok-a"}, {BuyerID: 1<<50 + 1, Token: "tok-b"}, {BuyerID: 1<<50 + 2, Token: "tok-c"}}
	row, err := Drive(t.Context(), Spec{Targets: []string{srv.URL}, ProductID: 9, Signed: signed, Requests: 30, Concurrency: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if row.SoldOut != 30 || row.Requests != 30 {
		t.Errorf("sold out %d of %d requests (%v): want 30 of 30", row.SoldOut, row.Requests, row.ErrorSamples)
	}
	want := map[string]int{}
	for _, s := range signed {
		want["Bearer "+s.Token+` {"product_id":9}`] = 10
	}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("requests by token and body (-want +got):\n%s", diff)
	}
}

// A run of signed-in buyers has them as its buyers and no fault.
func TestSignedBuyersRefuseOtherBuyersAndFaults(t *testing.T) {
	signed := []api.Session{{BuyerID: 1 << 50, Token: "tok"}}
	for _, s := range []Spec{{Buyers: 5, Signed: signed}, {Abandon: true, Signed: signed}} {
		s.Targets = []string{"http://127.0.0.1:1"}
		if _, err := s.withDefaults(); !errors.Is(err, ErrSpec) {
			t.Errorf("%+v: err %v, want ErrSpec", s, err)
		}
	}
}

// The report's tables fit 120 columns, and each names every one of its
// columns in its legend (issue 41: the table was 188 columns wide, and
// bought, early and agree were explained nowhere).
func TestTablesFitAndSayWhatTheirColumnsAre(t *testing.T) {
	rep := sampleReport()
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	machine := len(rep.MachineLines())
	lines := strings.Split(out.String(), "\n")
	for i, l := range lines[machine:] {
		if strings.HasPrefix(l, "race ") || strings.HasPrefix(l, "note ") || strings.HasPrefix(l, "error ") || strings.HasPrefix(l, "disagreement ") {
			break // the remarks: sentences, not the tables
		}
		if n := utf8.RuneCountInString(l); n > tableWidth {
			t.Errorf("line %d is %d columns wide, more than %d: %q", machine+i+1, n, tableWidth, l)
		}
	}
	for _, tb := range tables {
		legend := strings.Join(tb.legend, " ")
		for _, c := range tb.columns {
			if !strings.Contains(legend, c+":") && !strings.Contains(legend, c+",") {
				t.Errorf("the legend %q does not say what %q is", legend, c)
			}
		}
	}
}
