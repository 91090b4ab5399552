package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"seckill/internal/harness"
	"seckill/internal/server"
)

const adminToken = "s3cret"

// serve mounts l on the service's real routes, behind the admin token, and
// returns the base URL.
func serve(t *testing.T, l *Lab) string {
	t.Helper()
	srv := httptest.NewServer(server.New(server.Deps{Runs: l, AdminToken: adminToken}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { l.Close() }) // runs first: the run ends before the server goes
	return srv.URL
}

// send makes one request and decodes the JSON answer into out, if not nil.
func send(t *testing.T, method, url, body string, out any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decoding %q: %v", method, url, b, err)
		}
	}
	return resp.StatusCode
}

type apiError struct {
	Code  string `json:"code"`
	Error string `json:"error"`
}

// waitFinished polls the run until it is no longer running.
func waitFinished(t *testing.T, base, id string) Run {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var r Run
		if code := send(t, http.MethodGet, base+"/api/runs/"+id, "", &r); code != http.StatusOK {
			t.Fatalf("GET run %s: %d", id, code)
		}
		if r.Status != Running {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still running after 30s: %+v", id, r)
		}
		<-tick.C
	}
}

// instant is a runner that reports full progress and a SAFE row at once.
func instant(_ context.Context, s harness.Spec, progress func(harness.Progress)) (harness.Row, error) {
	progress(harness.Progress{Total: s.Requests, Done: s.Requests, OK: s.Stock})
	return harness.Row{
		Strategy: s.Lock, Mode: s.Mode, Instances: 1, Stock: s.Stock, Shards: s.Shards,
		Concurrency: s.Concurrency, Requests: s.Requests, OK: s.Stock, SoldOut: s.Requests - s.Stock,
		Sold: s.Stock, Verdict: harness.Safe, AuditVerdict: harness.Safe, Agree: true,
	}, nil
}

// blocking is a runner that holds its run until released or cancelled.
type blocking struct {
	started chan harness.Spec
	release chan struct{}
}

func newBlocking() *blocking {
	return &blocking{started: make(chan harness.Spec, 1), release: make(chan struct{})}
}

func (b *blocking) run(ctx context.Context, s harness.Spec, _ func(harness.Progress)) (harness.Row, error) {
	b.started <- s
	select {
	case <-b.release:
		return instant(ctx, s, func(harness.Progress) {})
	case <-ctx.Done():
		return harness.Row{Strategy: s.Lock, Mode: s.Mode}, ctx.Err()
	}
}

func TestStartRejectsBadSpecs(t *testing.T) {
	ran := make(chan struct{}, 1)
	l := New(Options{Run: func(ctx context.Context, s harness.Spec, p func(harness.Progress)) (harness.Row, error) {
		ran <- struct{}{}
		return instant(ctx, s, p)
	}})
	base := serve(t, l)
	for _, tc := range []struct {
		name, body, want string // want: a part of the error message
	}{
		{"empty body", ``, "reading the run's JSON"},
		{"not JSON", `{"lock":`, "reading the run's JSON"},
		{"trailing data", `{} {}`, "unexpected data"},
		{"unknown field", `{"lokc":"none"}`, `unknown field "lokc"`},
		{"wrong type", `{"stock":"many"}`, `field "stock" must be a int`},
		{"unknown lock", `{"lock":"magic"}`, `lock: "magic" is not a registered strategy`},
		{"unknown mode", `{"mode":"cas"}`, `mode: "cas" is not one of rmw, lua, db`},
		{"unknown fault", `{"fault":"meteor"}`, `fault: "meteor"`},
		{"negative stock", `{"stock":-1}`, "stock: -1 is out of range"},
		{"stock over the limit", `{"stock":10001}`, "stock: 10001 is out of range; it must be between 1 and 10000"},
		{"buyers over the limit", `{"buyers":20001}`, "buyers: 20001 is out of range"},
		{"requests over the limit", `{"buyers":10,"requests":20001}`, "requests: 20001 is out of range"},
		{"concurrency over the limit", `{"concurrency":257}`, "concurrency: 257 is out of range; it must be between 1 and 256"},
		{"negative concurrency", `{"concurrency":-4}`, "concurrency: -4 is out of range"},
		{"hold over the limit", `{"hold_ms":2001}`, "hold_ms: 2001 is out of range"},
		{"negative hold", `{"hold_ms":-1}`, "hold_ms: -1 is out of range"},
		{"too many shards", `{"shards":65}`, "shards: 65 is out of range"},
		{"more faulty requests than requests", `{"buyers":10,"fault":"abandon","fault_requests":11}`, "fault_requests: 11 is out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var e apiError
			code := send(t, http.MethodPost, base+"/api/runs", tc.body, &e)
			if code != http.StatusBadRequest || e.Code != "bad_request" || !strings.Contains(e.Error, tc.want) {
				t.Errorf("got %d %+v, want 400 bad_request with %q", code, e, tc.want)
			}
		})
	}
	var e apiError
	if code := send(t, http.MethodPost, base+"/api/runs", `{"lock":"`+strings.Repeat("x", 70<<10)+`"}`, &e); code != http.StatusRequestEntityTooLarge || e.Code != "too_large" {
		t.Errorf("a body over the limit: %d %+v, want 413 too_large", code, e)
	}
	select {
	case <-ran:
		t.Error("a rejected spec started a run")
	default:
	}
}

func TestSpecLimitsAreInclusive(t *testing.T) {
	for _, s := range []Spec{
		{Stock: MaxStock, Buyers: MaxBuyers, Requests: MaxRequests, Concurrency: MaxConcurrency, HoldMS: MaxHoldMS, Shards: 64},
		{Stock: 1, Buyers: 1, Requests: 1, Concurrency: 1, HoldMS: 0, Shards: 1, Fault: "abandon", FaultRequests: 1},
	} {
		if _, err := s.check(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
}

func TestStartNeedsTheAdminToken(t *testing.T) {
	base := serve(t, New(Options{Run: instant}))
	resp, err := http.Post(base+"/api/runs", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST without the token: %d, want 401", resp.StatusCode)
	}
}

func TestHappyPathReachesDone(t *testing.T) {
	var got []harness.Spec
	l := New(Options{ProductID: 4242, Timeout: 7 * time.Second, Run: func(ctx context.Context, s harness.Spec, p func(harness.Progress)) (harness.Row, error) {
		got = append(got, s) // runs are sequential: waitFinished orders them
		return instant(ctx, s, p)
	}})
	base := serve(t, l)

	var started Run
	code := send(t, http.MethodPost, base+"/api/runs",
		`{"lock":"none","mode":"rmw","stock":50,"buyers":300,"concurrency":64,"hold_ms":2}`, &started)
	if code != http.StatusAccepted || started.Status != Running || started.ID == "" {
		t.Fatalf("POST: %d %+v, want 202 running with an id", code, started)
	}
	wantSpec := Spec{Lock: "none", Mode: "rmw", Shards: 5, Stock: 50, Buyers: 300, Requests: 300, Concurrency: 64, HoldMS: 2, Fault: "none"}
	if diff := cmp.Diff(wantSpec, started.Spec); diff != "" {
		t.Errorf("spec with defaults (-want +got):\n%s", diff)
	}

	done := waitFinished(t, base, started.ID)
	if done.Status != Done || done.Error != "" || done.Result == nil {
		t.Fatalf("finished run: %+v, want done with a result", done)
	}
	if done.Result.Verdict != harness.Safe || done.Result.Strategy != "none" || done.Product != 4242 {
		t.Errorf("result: %+v on product %d", *done.Result, done.Product)
	}
	if done.Progress != (Progress{Done: 300, Total: 300, OK: 50}) {
		t.Errorf("progress: %+v", done.Progress)
	}

	// A second run starts once the first is over, and the list holds both.
	var second Run
	if code := send(t, http.MethodPost, base+"/api/runs", `{"lock":"token"}`, &second); code != http.StatusAccepted {
		t.Fatalf("second POST: %d", code)
	}
	waitFinished(t, base, second.ID)
	var list []Run
	if code := send(t, http.MethodGet, base+"/api/runs", "", &list); code != http.StatusOK {
		t.Fatalf("GET /api/runs: %d", code)
	}
	if len(list) != 2 || list[0].ID != started.ID || list[1].ID != second.ID {
		t.Errorf("list: %+v, want runs %s then %s", list, started.ID, second.ID)
	}

	// What the harness was told: this server, the lab's product, the
	// token, the time limit, and users of its own for each run.
	first := got[0]
	if len(first.Targets) != 1 || first.Targets[0] != base || first.ProductID != 4242 ||
		first.AdminToken != adminToken || time.Duration(first.Timeout) != 7*time.Second ||
		first.Hold != harness.Duration(2*time.Millisecond) || first.Lock != "none" {
		t.Errorf("harness spec: %+v", first)
	}
	if lo, hi := got[1].UserBase, got[1].UserBase+int64(got[1].Buyers); lo < first.UserBase+int64(first.Buyers) && hi > first.UserBase {
		t.Errorf("runs share user ids: %d+%d and %d+%d", first.UserBase, first.Buyers, got[1].UserBase, got[1].Buyers)
	}
}

func TestFaultsReachTheHarness(t *testing.T) {
	for _, tc := range []struct {
		fault string
		want  harness.Spec
	}{
		{"none", harness.Spec{}},
		{"abandon", harness.Spec{Abandon: true, FaultRequests: 1}},
		{"crash-before-expire", harness.Spec{CrashBeforeExpire: true, FaultRequests: 1}},
		{"clock-skew", harness.Spec{ClockSkew: harness.Duration(ClockSkew), FaultRequests: 1}},
	} {
		s, err := Spec{Fault: tc.fault, FaultRequests: tc.want.FaultRequests}.check()
		if err != nil {
			t.Fatalf("%s: %v", tc.fault, err)
		}
		h := s.harness("http://x", 1, 0, time.Second)
		got := harness.Spec{Abandon: h.Abandon, CrashBeforeExpire: h.CrashBeforeExpire, ClockSkew: h.ClockSkew, FaultRequests: h.FaultRequests}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.fault, diff)
		}
	}
}

func TestSecondRunWhileOneGoesIsRefused(t *testing.T) {
	b := newBlocking()
	base := serve(t, New(Options{Run: b.run}))
	var first Run
	if code := send(t, http.MethodPost, base+"/api/runs", `{}`, &first); code != http.StatusAccepted {
		t.Fatalf("first POST: %d", code)
	}
	<-b.started

	var e apiError
	code := send(t, http.MethodPost, base+"/api/runs", `{}`, &e)
	if code != http.StatusConflict || e.Code != "run_in_progress" || !strings.Contains(e.Error, "run "+first.ID) {
		t.Errorf("second POST: %d %+v, want 409 run_in_progress naming run %s", code, e, first.ID)
	}
	var list []Run
	send(t, http.MethodGet, base+"/api/runs", "", &list)
	if len(list) != 0 {
		t.Errorf("the list holds unfinished runs: %+v", list)
	}

	close(b.release)
	if r := waitFinished(t, base, first.ID); r.Status != Done {
		t.Errorf("released run: %+v", r)
	}
	var third Run
	if code := send(t, http.MethodPost, base+"/api/runs", `{}`, &third); code != http.StatusAccepted {
		t.Errorf("POST after the run ended: %d, want 202", code)
	}
	<-b.started
}

func TestTimeLimitCancelsTheRun(t *testing.T) {
	b := newBlocking()
	l := New(Options{Run: b.run, Timeout: time.Millisecond})
	l.grace = 0
	base := serve(t, l)
	var r Run
	send(t, http.MethodPost, base+"/api/runs", `{}`, &r)
	r = waitFinished(t, base, r.ID)
	if r.Status != Failed || !strings.Contains(r.Error, "time limit") {
		t.Errorf("run past its limit: %+v, want failed on the time limit", r)
	}
}

func TestHarnessTimeoutIsAFailure(t *testing.T) {
	base := serve(t, New(Options{Run: func(ctx context.Context, s harness.Spec, p func(harness.Progress)) (harness.Row, error) {
		row, _ := instant(ctx, s, p)
		row.TimedOut, row.Note = true, "timed out after 60s: 10 of 300 requests completed"
		return row, nil
	}}))
	var r Run
	send(t, http.MethodPost, base+"/api/runs", `{}`, &r)
	r = waitFinished(t, base, r.ID)
	if r.Status != Failed || !strings.Contains(r.Error, "10 of 300") || r.Result == nil {
		t.Errorf("timed-out run: %+v, want failed with its partial row", r)
	}
}

func TestCloseCancelsAndWaits(t *testing.T) {
	b := newBlocking()
	l := New(Options{Run: b.run})
	base := serve(t, l)
	var r Run
	send(t, http.MethodPost, base+"/api/runs", `{}`, &r)
	<-b.started
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// Close returned, so the run has been filed: no polling needed.
	send(t, http.MethodGet, base+"/api/runs/"+r.ID, "", &r)
	if r.Status != Failed || !strings.Contains(r.Error, "shutting down") {
		t.Errorf("run after Close: %+v", r)
	}
	var e apiError
	if code := send(t, http.MethodPost, base+"/api/runs", `{}`, &e); code != http.StatusServiceUnavailable {
		t.Errorf("POST after Close: %d %+v, want 503", code, e)
	}
}

func TestUnknownRunIsNotFound(t *testing.T) {
	base := serve(t, New(Options{Run: instant}))
	var e apiError
	if code := send(t, http.MethodGet, base+"/api/runs/nope", "", &e); code != http.StatusNotFound || e.Code != "not_found" {
		t.Errorf("GET unknown run: %d %+v", code, e)
	}
}

func TestOnlyTheLastRunsAreKept(t *testing.T) {
	base := serve(t, New(Options{Run: instant, Keep: 2}))
	var ids []string
	for range 3 {
		var r Run
		send(t, http.MethodPost, base+"/api/runs", `{}`, &r)
		waitFinished(t, base, r.ID)
		ids = append(ids, r.ID)
	}
	var list []Run
	send(t, http.MethodGet, base+"/api/runs", "", &list)
	var got []string
	for _, r := range list {
		got = append(got, r.ID)
	}
	if diff := cmp.Diff(ids[1:], got); diff != "" {
		t.Errorf("kept runs (-want +got):\n%s", diff)
	}
	if code := send(t, http.MethodGet, base+"/api/runs/"+ids[0], "", nil); code != http.StatusNotFound {
		t.Errorf("GET the dropped run: %d, want 404", code)
	}
}

// TestListIsJSONArray pins that an empty list is [], which the page iterates.
func TestListIsJSONArray(t *testing.T) {
	base := serve(t, New(Options{Run: instant}))
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/api/runs", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if got := string(bytes.TrimSpace(b)); got != "[]" {
		t.Errorf("empty list: %q, want []", got)
	}
}
