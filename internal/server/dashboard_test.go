package server_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"seckill/internal/testkit/testenv"
)

// TestDashboardQueriesExportedMetrics: every query of the Grafana dashboard
// (deploy/observability) names only metrics this service exports. The
// service runs with every optional family on (the concurrency limit, a
// gate) and sells once under a lock, once sold out, so that the labelled
// families have a series, then its /metrics is read.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	cfg := testenv.Config(t)
	cfg.ConcurrencyLimit = 100
	cfg.GateURLs, cfg.GateSecret = []string{"http://127.0.0.1:1"}, "test" // never told anything here
	e := start(t, cfg)
	id := e.reset(product{"stock": 1, "shards": 1, "mode": "rmw", "lock": "token"})
	for user, want := range []int{http.StatusCreated, http.StatusConflict} {
		if st := e.do("POST", "/api/orders", map[string]any{"user_id": user + 1, "product_id": id}, nil); st != want {
			t.Fatalf("purchase %d: status %d, want %d", user+1, st, want)
		}
	}
	exported := exportedFamilies(t, e.url+"/metrics")

	data, err := os.ReadFile("../../deploy/observability/grafana/dashboards/seckill.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("the dashboard does not read: %v", err)
	}
	if len(dash.Panels) == 0 {
		t.Fatal("the dashboard has no panel")
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			names := metricNames(tg.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: no metric in %q", p.Title, tg.Expr)
			}
			for _, n := range names {
				if !exported[n] {
					t.Errorf("panel %q queries %s, which the service does not export", p.Title, n)
				}
			}
		}
	}
}

// exportedFamilies reads the names a scrape of url offers: each family's,
// and a histogram's _bucket, _sum and _count series.
func exportedFamilies(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 || f[0] != "#" || f[1] != "TYPE" {
			continue
		}
		out[f[2]] = true
		if f[3] == "histogram" || f[3] == "summary" {
			out[f[2]+"_sum"], out[f[2]+"_count"] = true, true
			out[f[2]+"_bucket"] = f[3] == "histogram"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	promQuoted   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent    = regexp.MustCompile(`[a-zA-Z0-9_:.]+`)
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "offset": true, "bool": true, "inf": true, "nan": true}
)

// metricNames are the metrics a PromQL expression reads: its identifiers
// once the label matchers, ranges, groupings and strings are taken out,
// less the functions (an identifier followed by "(") and the keywords.
func metricNames(expr string) []string {
	expr = promQuoted.ReplaceAllString(expr, `""`)
	expr = promMatchers.ReplaceAllString(expr, " ")
	expr = promGrouping.ReplaceAllString(expr, " ")
	var names []string
	for _, loc := range promIdent.FindAllStringIndex(expr, -1) {
		word := expr[loc[0]:loc[1]]
		call := strings.HasPrefix(strings.TrimLeft(expr[loc[1]:], " "), "(")
		// Numbers and durations (0.99, 5m) begin with a digit or a dot.
		if word[0] >= '0' && word[0] <= '9' || word[0] == '.' || call || promKeywords[strings.ToLower(word)] {
			continue
		}
		names = append(names, word)
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string]string{
		`histogram_quantile(0.99, sum by (lock, le) (rate(seckill_lock_wait_seconds_bucket{route="/a{b}"}[1m])))`: "seckill_lock_wait_seconds_bucket",
		`sum(rate(a_total[5m])) / ignoring(x) sum(rate(b_total[5m])) or vector(0)`:                                "a_total b_total",
		`max(seckill_queue_orders) offset 5m`:                                                                     "seckill_queue_orders",
	} {
		if got := strings.Join(metricNames(expr), " "); got != want {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}
