package server_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/lab"
	"seckill/internal/lab/harness"
	"seckill/internal/server"
)

const adminToken = "s3cret"

// serveRuns mounts l on the service's real routes, behind the admin token.
func serveRuns(t *testing.T, l *lab.Lab) *env {
	t.Helper()
	e := serve(t, server.Deps{Runs: l, AdminToken: adminToken})
	t.Cleanup(func() { l.Close() }) // runs first: the run ends before the server goes
	return e
}

// waitFinished polls the run until it is no longer running.
func (e *env) waitFinished(id string) api.Run {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var r api.Run
		if code := e.do(http.MethodGet, "/api/runs/"+id, nil, &r); code != http.StatusOK {
			e.t.Fatalf("GET run %s: %d", id, code)
		}
		if r.Status != api.RunRunning && r.Status != api.RunQueued {
			return r
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("run %s still running after 30s: %+v", id, r)
		}
		<-tick.C
	}
}

// instant is a runner that reports a SAFE row at once.
func instant(_ context.Context, s harness.Spec, _ func(harness.Progress)) (harness.Row, error) {
	return harness.Row{RunResult: api.RunResult{Strategy: s.Lock, Mode: s.Mode, Stock: s.Stock, Requests: s.Requests,
		OK: s.Stock, Verdict: harness.Safe, AuditVerdict: harness.Safe, Agree: true}}, nil
}

// held is a runner that holds its run until the test ends.
func held() (lab.Runner, <-chan struct{}) {
	started := make(chan struct{}, 1)
	return func(ctx context.Context, s harness.Spec, _ func(harness.Progress)) (harness.Row, error) {
		started <- struct{}{}
		<-ctx.Done()
		return harness.Row{}, ctx.Err()
	}, started
}

func TestRunStartsAndReportsOverHTTP(t *testing.T) {
	targets := make(chan []string, 1)
	e := serveRuns(t, lab.New(lab.Options{Run: func(ctx context.Context, s harness.Spec, p func(harness.Progress)) (harness.Row, error) {
		targets <- s.Targets
		return instant(ctx, s, p)
	}}))

	req, _ := http.NewRequest(http.MethodPost, e.url+"/api/runs", strings.NewReader(`{"lock":"none","stock":50,"buyers":300}`))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || !strings.HasPrefix(resp.Header.Get("Location"), "/api/runs/") {
		t.Fatalf("POST: %d, Location %q; want 202 and the run's URL", resp.StatusCode, resp.Header.Get("Location"))
	}
	// The run's orders go back through the listener the request arrived on.
	if got := <-targets; len(got) != 1 || got[0] != e.url {
		t.Errorf("targets %q, want [%s]", got, e.url)
	}
	var r api.Run
	if code := e.do(http.MethodGet, resp.Header.Get("Location"), nil, &r); code != http.StatusOK {
		t.Fatalf("GET %s: %d", resp.Header.Get("Location"), code)
	}
	r = e.waitFinished(r.ID)
	if r.Status != api.RunDone || r.Result == nil || r.Result.Verdict != harness.Safe || r.Spec.Requests != 300 {
		t.Errorf("finished run: %+v", r)
	}
	var list []api.Run
	if code := e.do(http.MethodGet, "/api/runs", nil, &list); code != http.StatusOK || len(list) != 1 || list[0].ID != r.ID {
		t.Errorf("GET /api/runs: %d %+v, want the one run", code, list)
	}
}

func TestRunsRejectBadBodies(t *testing.T) {
	ran := make(chan struct{}, 1)
	e := serveRuns(t, lab.New(lab.Options{Run: func(ctx context.Context, s harness.Spec, p func(harness.Progress)) (harness.Row, error) {
		ran <- struct{}{}
		return instant(ctx, s, p)
	}}))
	for _, tc := range []struct {
		name, body, want string // want: a part of the error message
	}{
		{"empty body", ``, "empty body"},
		{"not JSON", `{"lock":`, "malformed JSON"},
		{"trailing data", `{} {}`, "unexpected data"},
		{"unknown field", `{"lokc":"none"}`, `unknown field "lokc"`},
		{"wrong case", `{"Lock":"none"}`, `unknown field "Lock": names are case-sensitive, this one is "lock"`},
		{"duplicate key", `{"lock":"token","lock":"none"}`, `duplicate key "lock"`},
		{"wrong type", `{"stock":"many"}`, `field "stock" must be an integer`},
		{"unknown lock", `{"lock":"magic"}`, `lock: "magic" is not a registered strategy`},
		{"stock over the limit", `{"stock":10001}`, "stock: 10001 is out of range; it must be between 1 and 10000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ae api.Error
			code := e.do(http.MethodPost, "/api/runs", tc.body, &ae)
			if code != http.StatusBadRequest || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Error, tc.want) {
				t.Errorf("got %d %+v, want 400 bad_request with %q", code, ae, tc.want)
			}
		})
	}
	var ae api.Error
	if code := e.do(http.MethodPost, "/api/runs", `{"lock":"`+strings.Repeat("x", 70<<10)+`"}`, &ae); code != http.StatusRequestEntityTooLarge || ae.Code != api.CodeTooLarge {
		t.Errorf("a body over the limit: %d %+v, want 413 too_large", code, ae)
	}
	select {
	case <-ran:
		t.Error("a rejected spec started a run")
	default:
	}
}

func TestRunsNeedTheAdminToken(t *testing.T) {
	e := serveRuns(t, lab.New(lab.Options{Run: instant}))
	e.token = ""
	var ae api.Error
	if code := e.do(http.MethodPost, "/api/runs", `{}`, &ae); code != http.StatusUnauthorized || ae.Code != api.CodeUnauthorized {
		t.Errorf("POST without the token: %d %+v, want 401 unauthorized", code, ae)
	}
}

// TestRunsQueueForAClass: a run started while another goes is queued with
// its place; ?seat= lists a seat's own runs, and the class's answers to
// the course are kept and counted for the teacher, behind the token.
func TestRunsQueueForAClass(t *testing.T) {
	run, started := held()
	e := serveRuns(t, lab.New(lab.Options{Run: run}))
	var first, second api.Run
	if code := e.do(http.MethodPost, "/api/runs", `{"seat":"teacher"}`, &first); code != http.StatusAccepted {
		t.Fatalf("first POST: %d", code)
	}
	<-started
	code := e.do(http.MethodPost, "/api/runs", `{"seat":"ana","student":"Ana"}`, &second)
	if code != http.StatusAccepted || second.Status != api.RunQueued || second.Place != 1 {
		t.Errorf("second POST: %d %+v, want 202 queued at place 1", code, second)
	}
	var mine []api.Run
	if code := e.do(http.MethodGet, "/api/runs?seat=ana", nil, &mine); code != http.StatusOK || len(mine) != 1 || mine[0].ID != second.ID || mine[0].Place != 1 {
		t.Errorf("Ana's runs: %d %+v, want her queued run alone", code, mine)
	}
	var all []api.Run
	if code := e.do(http.MethodGet, "/api/runs", nil, &all); code != http.StatusOK || len(all) != 2 {
		t.Errorf("the class's runs: %d %+v, want both", code, all)
	}

	answer := `{"seat":"ana","student":"Ana","lesson":"no-lock","run":"` + second.ID + `","predictions":[{"predicted":"exactly","outcome":"more","held":false}]}`
	var kept api.ClassAnswer
	if code := e.do(http.MethodPost, "/api/class/answers", answer, &kept); code != http.StatusCreated || kept.Held || kept.At.IsZero() {
		t.Errorf("POST an answer: %d %+v, want 201, not held, stamped", code, kept)
	}
	var ae api.Error
	if code := e.do(http.MethodPost, "/api/class/answers", `{"seat":"ana","lesson":"no-lock","predictions":[{"predicted":"lots"}]}`, &ae); code != http.StatusBadRequest {
		t.Errorf("POST an answer with a guess not listed: %d %+v, want 400", code, ae)
	}
	var lessons []api.ClassLesson
	if code := e.do(http.MethodGet, "/api/class/answers", nil, &lessons); code != http.StatusOK || len(lessons) != 1 ||
		lessons[0].Seats != 1 || lessons[0].Held != 0 || len(lessons[0].Predicted) != 1 || lessons[0].Predicted[0].Predicted != "exactly" {
		t.Errorf("the teacher's view: %d %+v, want no-lock with Ana's exactly, not held", code, lessons)
	}
	e.token = ""
	if code := e.do(http.MethodGet, "/api/class/answers", nil, &ae); code != http.StatusUnauthorized {
		t.Errorf("the teacher's view without the token: %d, want 401", code)
	}
}

// TestRunsKeepAClassNamesFromStrangers: the students' names and seats are
// read by the operator and by each seat of its own runs; whoever else
// reaches the service reads the runs without them.
func TestRunsKeepAClassNamesFromStrangers(t *testing.T) {
	e := serveRuns(t, lab.New(lab.Options{Run: instant}))
	var ana api.Run
	if code := e.do(http.MethodPost, "/api/runs", `{"seat":"ana-seat","student":"Ana"}`, &ana); code != http.StatusAccepted {
		t.Fatalf("POST Ana's run: %d", code)
	}
	// get reads path with the operator's token, or with none, into out,
	// which it zeroes first: JSON decoding keeps what an absent field had.
	get := func(path string, asOperator bool, out any) {
		t.Helper()
		switch v := out.(type) {
		case *[]api.Run:
			*v = nil
		case *api.Run:
			*v = api.Run{}
		}
		req, err := http.NewRequest(http.MethodGet, e.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if asOperator {
			req.Header.Set("Authorization", "Bearer "+e.token)
		}
		if code := e.send(req, out); code != http.StatusOK {
			t.Fatalf("GET %s: %d", path, code)
		}
	}
	named := func(runs ...api.Run) (n int) {
		for _, r := range runs {
			if r.Spec.Student == "Ana" && r.Spec.Seat == "ana-seat" {
				n++
			}
		}
		return n
	}
	unnamed := func(runs ...api.Run) bool {
		return len(runs) == 1 && runs[0].ID == ana.ID && runs[0].Spec.Student == "" && runs[0].Spec.Seat == ""
	}
	var runs []api.Run
	if get("/api/runs", true, &runs); len(runs) != 1 || named(runs...) != 1 {
		t.Errorf("the operator's list: %+v, want Ana's run with her name", runs)
	}
	if get("/api/runs", false, &runs); !unnamed(runs...) {
		t.Errorf("a stranger's list: %+v, want the run without a seat or a student", runs)
	}
	if get("/api/runs?seat=ana-seat", false, &runs); len(runs) != 1 || named(runs...) != 1 {
		t.Errorf("Ana's seat's list: %+v, want her run with her name", runs)
	}
	var one api.Run
	for _, path := range []string{"/api/runs/" + ana.ID, "/api/runs/" + ana.ID + "?seat=bo-seat"} {
		if get(path, false, &one); !unnamed(one) {
			t.Errorf("GET %s without the token: %+v, want the run without a seat or a student", path, one)
		}
	}
	if get("/api/runs/"+ana.ID+"?seat=ana-seat", false, &one); named(one) != 1 {
		t.Errorf("Ana's seat's GET of the run: %+v, want her name", one)
	}
	if get("/api/runs/"+ana.ID, true, &one); named(one) != 1 {
		t.Errorf("the operator's GET of the run: %+v, want her name", one)
	}
}

// TestTheClassTokenRunsLessonsOnly: the class token, which students hold,
// starts lab runs, sends lesson answers and reads the class's names; it
// opens none of the operator's other doors, and it is the operator
// token's own: derived from it, it changes with it.
func TestTheClassTokenRunsLessonsOnly(t *testing.T) {
	e := serveRuns(t, lab.New(lab.Options{Run: instant}))
	class := server.ClassToken(adminToken)
	if class == "" || class == adminToken || class != server.ClassToken(adminToken) || class == server.ClassToken(adminToken+"x") ||
		server.ClassToken("") != "" {
		t.Fatalf("ClassToken(%q) = %q: want a token of its own, the same for the same operator token, another for another, none for none", adminToken, class)
	}
	send := func(method, path, token, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return e.send(req, nil) // which checks the answer against the contract
	}
	if code := send(http.MethodPost, "/api/runs", class, `{"seat":"ana-seat","student":"Ana"}`); code != http.StatusAccepted {
		t.Errorf("a lab run with the class token: %d, want 202", code)
	}
	// A seatless run escapes the seats' queue limit: the operator's alone.
	if code := send(http.MethodPost, "/api/runs", class, `{}`); code != http.StatusBadRequest {
		t.Errorf("a seatless lab run with the class token: %d, want 400", code)
	}
	req, _ := http.NewRequest(http.MethodGet, e.url+"/api/runs", nil)
	req.Header.Set("Authorization", "Bearer "+class)
	var runs []api.Run
	// A seat keys its answers and queue places: the class reads the name,
	// not the seat.
	if code := e.send(req, &runs); code != http.StatusOK || len(runs) != 1 || runs[0].Spec.Student != "Ana" || runs[0].Spec.Seat != "" {
		t.Errorf("the class's list with the class token: %d %+v, want Ana's run with her name and without her seat", code, runs)
	}
	answer := `{"seat":"ana-seat","lesson":"no-lock","predictions":[{"predicted":"more"}]}`
	if code := send(http.MethodPost, "/api/class/answers", class, answer); code != http.StatusCreated {
		t.Errorf("a lesson's answer with the class token: %d, want 201", code)
	}
	for _, tc := range []struct{ method, path, token, body string }{
		{http.MethodGet, "/api/class/answers", class, ""},
		{http.MethodPost, "/api/products", class, `{"id":1,"stock":1}`},
		{http.MethodPost, "/api/products/1/reconcile", class, ""},
		{http.MethodPost, "/api/runs", class + "x", `{}`},
		{http.MethodPost, "/api/runs", "", `{}`},
		{http.MethodPost, "/api/class/answers", server.ClassToken("another operator token"), answer},
	} {
		if code := send(tc.method, tc.path, tc.token, tc.body); code != http.StatusUnauthorized {
			t.Errorf("%s %s with token %q: %d, want 401", tc.method, tc.path, tc.token, code)
		}
	}
}

func TestRunsAfterCloseAreUnavailable(t *testing.T) {
	run, started := held()
	l := lab.New(lab.Options{Run: run})
	e := serveRuns(t, l)
	var r api.Run
	e.do(http.MethodPost, "/api/runs", `{}`, &r)
	<-started
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if e.do(http.MethodGet, "/api/runs/"+r.ID, nil, &r); r.Status != api.RunFailed || !strings.Contains(r.Error, "shutting down") {
		t.Errorf("run after Close: %+v", r)
	}
	var ae api.Error
	if code := e.do(http.MethodPost, "/api/runs", `{}`, &ae); code != http.StatusServiceUnavailable || ae.Code != api.CodeUnavailable ||
		!strings.Contains(ae.Error, "shutting down") {
		t.Errorf("POST after Close: %d %+v, want 503 unavailable saying why", code, ae)
	}
}

func TestUnknownRunIsNotFound(t *testing.T) {
	e := serveRuns(t, lab.New(lab.Options{Run: instant}))
	var ae api.Error
	if code := e.do(http.MethodGet, "/api/runs/nope", nil, &ae); code != http.StatusNotFound || ae.Code != api.CodeNotFound {
		t.Errorf("GET unknown run: %d %+v", code, ae)
	}
}

// TestRunListIsJSONArray pins that an empty list is [], which the page iterates.
func TestRunListIsJSONArray(t *testing.T) {
	e := serveRuns(t, lab.New(lab.Options{Run: instant}))
	resp, err := e.client.Get(e.url + "/api/runs")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if got := string(bytes.TrimSpace(b)); got != "[]" {
		t.Errorf("empty list: %q, want []", got)
	}
}

// TestRunsAgainstTheService runs the real harness through the real service
// on its embedded Redis and SQLite: the lab sends the run back through the
// service's own address, with the default address rate on; the absent
// lock oversells and the token lock does not, nor the async mode.
func TestRunsAgainstTheService(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the service and sends a few hundred orders")
	}
	// The embedded backends: the lab sells product 9001, which a test on a
	// shared real Redis must not touch.
	cfg, _, err := app.ParseConfig("seckill", []string{"-addr", "127.0.0.1:0", "-rate-limit", "0", "-demo-stock", "0"},
		func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	e := startWith(t, cfg, app.Extras{Runs: lab.New(lab.Options{})})

	// The default address rate is on: the harness, at one address, polls
	// the lab product's audit, drain and lookups past it (exempt).
	for _, tc := range []struct{ lock, mode, want string }{
		{"none", "rmw", harness.Oversold},
		{"token", "rmw", harness.Safe},
		{"none", "async", harness.Safe},
	} {
		var r api.Run
		body := `{"lock":"` + tc.lock + `","mode":"` + tc.mode + `","stock":50,"buyers":300,"concurrency":64,"hold_ms":2}`
		if code := e.do(http.MethodPost, "/api/runs", body, &r); code != http.StatusAccepted {
			t.Fatalf("%s: POST %d", tc.lock, code)
		}
		r = e.waitFinished(r.ID)
		if r.Status != api.RunDone || r.Result == nil {
			t.Fatalf("%s: %+v", tc.lock, r)
		}
		row := *r.Result
		if row.Verdict != tc.want || row.Requests != 300 || !row.Agree {
			t.Errorf("%s: verdict %s over %d requests (agree %v: %v), want %s over 300 (%+v)",
				tc.lock, row.Verdict, row.Requests, row.Agree, row.Disagreements, tc.want, row)
		}
		if tc.want == harness.Oversold && row.Oversold+row.LostUpdates == 0 {
			t.Errorf("%s: OVERSOLD with nothing oversold or lost: %+v", tc.lock, row)
		}
	}
}

// TestRunTimelineOverHTTP: a finished run's timeline is served at
// /api/runs/:id/timeline; a run going is listed with its progress and has
// no timeline yet (404).
func TestRunTimelineOverHTTP(t *testing.T) {
	sentence := "buyers 1 and 2 both read 5 from shard 0 at 1.00 ms and both wrote 4"
	e := serveRuns(t, lab.New(lab.Options{Run: func(ctx context.Context, s harness.Spec, p func(harness.Progress)) (harness.Row, error) {
		row, err := instant(ctx, s, p)
		row.Timeline = &api.Timeline{Shards: 1, Sentence: sentence}
		return row, err
	}}))
	var r api.Run
	e.do(http.MethodPost, "/api/runs", `{}`, &r)
	e.waitFinished(r.ID)
	var tl api.Timeline
	if code := e.do(http.MethodGet, "/api/runs/"+r.ID+"/timeline", nil, &tl); code != http.StatusOK || tl.Sentence != sentence {
		t.Errorf("the finished run's timeline: %d %+v, want 200 with its sentence", code, tl)
	}

	run, started := held()
	e = serveRuns(t, lab.New(lab.Options{Run: run}))
	var going api.Run
	e.do(http.MethodPost, "/api/runs", `{}`, &going)
	<-started
	var list []api.Run
	if e.do(http.MethodGet, "/api/runs", nil, &list); len(list) != 1 || list[0].ID != going.ID || list[0].Status != api.RunRunning {
		t.Errorf("GET /api/runs while run %s goes: %+v, want it, running", going.ID, list)
	}
	var ae api.Error
	if code := e.do(http.MethodGet, "/api/runs/"+going.ID+"/timeline", nil, &ae); code != http.StatusNotFound || ae.Code != api.CodeNotFound {
		t.Errorf("the timeline of a run going: %d %+v, want 404 not_found", code, ae)
	}
}
