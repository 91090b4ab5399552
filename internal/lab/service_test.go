package lab

import (
	"net/http"
	"testing"

	"seckill/internal/app"
	"seckill/internal/harness"
	"seckill/internal/testenv"
)

// TestRunsAgainstTheService runs the real harness through the real service
// on its embedded Redis and SQLite: the lab finds the service's own address
// from the request, the absent lock oversells and the token lock does not.
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
	srv := testenv.Start(t, cfg, app.Extras{Runs: New(Options{})})

	for _, tc := range []struct{ lock, want string }{
		{"none", harness.Oversold},
		{"token", harness.Safe},
	} {
		var r Run
		body := `{"lock":"` + tc.lock + `","mode":"rmw","stock":50,"buyers":300,"concurrency":64,"hold_ms":2}`
		if code := send(t, http.MethodPost, srv.URL+"/api/runs", body, &r); code != http.StatusAccepted {
			t.Fatalf("%s: POST %d", tc.lock, code)
		}
		r = waitFinished(t, srv.URL, r.ID)
		if r.Status != Done || r.Result == nil {
			t.Fatalf("%s: %+v", tc.lock, r)
		}
		row := *r.Result
		if row.Verdict != tc.want || row.Requests != 300 || !row.Agree {
			t.Errorf("%s: verdict %s over %d requests (agree %v: %v), want %s over 300",
				tc.lock, row.Verdict, row.Requests, row.Agree, row.Disagreements, tc.want)
		}
		if tc.want == harness.Oversold && row.Oversold+row.LostUpdates == 0 {
			t.Errorf("%s: OVERSOLD with nothing oversold or lost: %+v", tc.lock, row)
		}
	}
}
