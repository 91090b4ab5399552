package server_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"seckill/internal/gate"
	"seckill/internal/server"
)

// The gate notifier's counts (two gates accept, one refuses) of notices sent and failed are in /metrics,
// under one name with outcome sent or failed, as they are at each scrape.
func TestGateNoticesInMetrics(t *testing.T) {
	accepting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(accepting.Close)
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	t.Cleanup(refusing.Close)
	n, err := gate.New(gate.Options{URLs: []string{accepting.URL, accepting.URL + "/", refusing.URL}, Tries: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	e := serve(t, server.Deps{Gate: n})

	for round := int64(1); round <= 2; round++ {
		n.StockBack(round)
		deadline := time.Now().Add(5 * time.Second)
		for n.Sent() < 2*round || n.Failed() < round {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the notices were never sent: sent %d, failed %d", round, n.Sent(), n.Failed())
			}
			time.Sleep(time.Millisecond)
		}
		body := e.getMetrics()
		for _, want := range []string{
			fmt.Sprintf(`seckill_gate_notices_total{outcome="sent"} %d`, 2*round),
			fmt.Sprintf(`seckill_gate_notices_total{outcome="failed"} %d`, round),
		} {
			if !strings.Contains(body, want+"\n") {
				t.Errorf("round %d: /metrics lacks %s", round, want)
			}
		}
	}
	// Without a notifier the series are absent, not zero.
	if body := serve(t, server.Deps{}).getMetrics(); strings.Contains(body, "seckill_gate_notices_total") {
		t.Errorf("/metrics of a server without gates has the gate's notices")
	}
}

func (e *env) getMetrics() string {
	e.t.Helper()
	resp, err := e.client.Get(e.url + "/metrics")
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return string(body)
}
