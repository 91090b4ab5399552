package harness

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"

	"seckill/internal/api"
)

// curveRow is a run of strategy/mode on shards, instances and masters at
// rps req/s and a p99 of p99 ms.
func curveRow(strategy, mode string, shards, instances, masters int, rps, p99 float64) Row {
	return Row{RunResult: api.RunResult{Strategy: strategy, Mode: mode, Shards: shards, Instances: instances, Masters: masters,
		RPS: rps, P99MS: p99, Verdict: Safe}}
}

// A report draws req/s and p99 against each dimension along which a kind
// of run was measured at two values or more, the others held: the medians
// of the repeats at each value, in the dimension's order. A kind measured
// at one value, a skipped row and a row without the dimension draw nothing.
func TestCurvesAgainstEachDimension(t *testing.T) {
	skipped := curveRow("token", "rmw", 8, 1, 0, 9999, 1)
	skipped.Verdict = Skipped
	rep := Report{Rows: []Row{
		curveRow("token", "rmw", 4, 1, 0, 400, 40),
		curveRow("token", "rmw", 1, 1, 0, 100, 10),
		curveRow("token", "rmw", 2, 1, 0, 200, 20),
		curveRow("token", "rmw", 2, 1, 0, 260, 30),
		curveRow("token", "rmw", 2, 1, 0, 220, 26),
		skipped,
		curveRow("none", "lua", 5, 1, 0, 900, 3), // one value of shards: no curve
		curveRow("none", "lua", 5, 2, 0, 1500, 4),
		curveRow("none", "lua", 5, 4, 0, 2500, 6),
		curveRow("none", "lua", 6, 1, 1, 800, 5),
		curveRow("none", "lua", 6, 1, 3, 700, 7),
		curveRow("none", "lua", 6, 1, 6, 650, 9),
	}}
	want := []Curve{
		{ID: "shards", Title: "req/s and p99 against shards", X: "shards", Series: []Series{
			{Label: "token/rmw", Points: []Point{{1, 100, 10, 1}, {2, 220, 26, 3}, {4, 400, 40, 1}}},
		}},
		{ID: "instances", Title: "req/s and p99 against service instances", X: "service instances", Series: []Series{
			{Label: "none/lua 5sh", Points: []Point{{1, 900, 3, 1}, {2, 1500, 4, 1}, {4, 2500, 6, 1}}},
		}},
		{ID: "masters", Title: "req/s and p99 against Redis masters", X: "Redis masters", Series: []Series{
			{Label: "none/lua 6sh", Points: []Point{{1, 800, 5, 1}, {3, 700, 7, 1}, {6, 650, 9, 1}}},
		}},
	}
	if diff := cmp.Diff(want, rep.Curves()); diff != "" {
		t.Errorf("curves (-want +got):\n%s", diff)
	}
	if got := (Report{Rows: rep.Rows[:1]}).Curves(); got != nil {
		t.Errorf("one row draws %v, want no curve", got)
	}
}

// The HTML report carries a req/s and a p99 chart for each curve and the
// masters' shares, with their data inlined.
func TestReportHTMLDrawsCurvesAndShares(t *testing.T) {
	rep := Report{Title: "curves", Rows: []Row{
		curveRow("none", "lua", 1, 1, 0, 100, 10), curveRow("none", "lua", 8, 1, 0, 500, 30),
	}, Shares: []MasterShares{{Masters: 1, Commands: []float64{1}, CPU: []float64{1}}, {Masters: 3, Commands: []float64{.3, .3, .4}, CPU: []float64{.2, .3, .5}}}}
	var buf bytes.Buffer
	if err := rep.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	var canvases []string
	for _, m := range regexp.MustCompile(`data-curve="([^"]+)"`).FindAllStringSubmatch(page, -1) {
		canvases = append(canvases, m[1])
	}
	if diff := cmp.Diff([]string{"shards-rps", "shards-p99", "shares-commands", "shares-cpu"}, canvases); diff != "" {
		t.Errorf("curve canvases (-want +got):\n%s", diff)
	}
	for id, want := range map[string]any{"curves-data": rep.Curves(), "shares-data": rep.Shares} {
		m := regexp.MustCompile(`(?s)<script type="application/json" id="` + id + `">(.*?)</script>`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("the report has no %s", id)
		}
		wantJSON, _ := json.Marshal(want)
		var got, w any
		if err := json.Unmarshal([]byte(m[1]), &got); err != nil {
			t.Fatalf("%s: %v\n%s", id, err, m[1])
		}
		_ = json.Unmarshal(wantJSON, &w)
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", id, diff)
		}
	}
}
