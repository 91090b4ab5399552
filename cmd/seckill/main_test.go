package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"seckill/internal/durability"
	"seckill/internal/server"
	"seckill/internal/testkit/testenv"
)

// started is a service run as main runs it.
type started struct {
	url    string
	line   string // the serving line
	token  string // the operator token the serving line told
	cancel context.CancelFunc
	errc   chan error
	log    *lockedBuffer // what run wrote to stderr
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startRun runs the embedded default; extra adds to its environment.
func startRun(t *testing.T, extra ...string) *started {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	out, outW := io.Pipe()
	s := &started{cancel: cancel, errc: make(chan error, 1), log: new(lockedBuffer)}
	env := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "LOG_LEVEL": "warn", "RATE_LIMIT": "0"}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	go func() {
		s.errc <- run(ctx, []string{"seckill"}, func(k string) string { return env[k] }, outW, s.log)
		outW.Close()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the start-up line: %v (run: %v)", err, <-s.errc)
	}
	go io.Copy(io.Discard, out)
	url, _, ok := strings.Cut(strings.TrimPrefix(line, "seckill serving "), "/ ")
	if !ok || !strings.Contains(line, "embedded") {
		t.Fatalf("start-up line %q: want the URL and the embedded mode", line)
	}
	s.url, s.line = url, strings.TrimSpace(line)
	if m := regexp.MustCompile(`; operator token (\S+)`).FindStringSubmatch(line); m != nil {
		s.token = m[1]
	}
	waitHealthy(t, url)
	return s
}

// stop cancels run's context and expects it to return nil within limit.
func (s *started) stop(t *testing.T, limit time.Duration) {
	t.Helper()
	s.cancel()
	select {
	case err := <-s.errc:
		if err != nil {
			t.Errorf("run returned %v after shutdown, want nil", err)
		}
	case <-time.After(limit):
		t.Fatalf("run did not return within %s of its context's end", limit)
	}
}

// TestRun starts the service as main would, on the embedded default, waits
// for /healthz, buys from the demo product, then shuts it down.
func TestRun(t *testing.T) {
	s := startRun(t)
	// The demo product is not a lab product: its buyer signs in.
	req, err := http.NewRequest(http.MethodPost, s.url+"/api/orders", strings.NewReader(`{"product_id":1}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testenv.SignIn(t, s.url, "demo buyer").Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("buying from the demo product: status %d, want 201", resp.StatusCode)
	}
	if err := run(t.Context(), []string{"seckill", "-healthcheck", s.url + "/healthz"}, nil, io.Discard, io.Discard); err != nil {
		t.Errorf("-healthcheck of a serving instance: %v", err)
	}
	s.stop(t, 15*time.Second)
	if err := run(t.Context(), []string{"seckill", "-healthcheck", s.url + "/healthz"}, nil, io.Discard, io.Discard); err == nil {
		t.Error("-healthcheck of a stopped instance succeeded")
	}
}

// TestShutdownCancelsALabRun: a lab run is a long job sending requests to
// this very server; shutdown must cancel it rather than wait it out.
func TestShutdownCancelsALabRun(t *testing.T) {
	s := startRun(t)
	// Serialized 50 ms holds: this run alone would take minutes.
	body := `{"lock":"token","mode":"rmw","shards":1,"stock":5000,"buyers":5000,"requests":5000,"concurrency":4,"hold_ms":50}`
	req, err := http.NewRequest(http.MethodPost, s.url+"/api/runs", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	// No ADMIN_TOKEN: the service made one and said it on the serving line.
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("starting a lab run: status %d, want 202", resp.StatusCode)
	}
	s.stop(t, 20*time.Second)
	// Cancelled by the shutdown, not cut off by the closing server.
	if log := s.log.String(); !strings.Contains(log, "shutting down") || !strings.Contains(log, "lab run failed") {
		t.Errorf("the lab run did not end by cancellation; log:\n%s", log)
	}
}

func waitHealthy(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/healthz did not answer 200 in time: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRunFlags(t *testing.T) {
	noenv := func(string) string { return "" }
	var help strings.Builder
	// main exits 1 on an error: asking for help is not one.
	if err := run(t.Context(), []string{"seckill", "-h"}, noenv, io.Discard, &help); err != nil {
		t.Errorf("-h returned %v, want nil", err)
	}
	for _, want := range []string{"-addr", "$HTTP_ADDR", "127.0.0.1:8080", "$REDIS_ADDR", "$MYSQL_DSN", "$RATE_LIMIT", "(default 3s)",
		"-healthcheck [URL]", "http://127.0.0.1:8080/healthz"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("-h output lacks %q:\n%s", want, help.String())
		}
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-lock-ttl", "soon"}, nil, "invalid value"},
		{[]string{"-rate-limit", "-1s"}, nil, "must not be negative"},
		{nil, map[string]string{"LOCK_WAIT": "forever"}, "$LOCK_WAIT"},
		{[]string{"extra"}, nil, "unexpected arguments"},
		{[]string{"-log-level", "loud"}, nil, "-log-level"},
	} {
		getenv := func(k string) string { return tc.env[k] }
		err := run(t.Context(), append([]string{"seckill"}, tc.args...), getenv, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run %v env %v: error %v, want one containing %q", tc.args, tc.env, err, tc.want)
		}
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:8080": true, "[::1]:8080": true,
		"0.0.0.0:8080": false, ":8080": false, "10.0.0.5:8080": false, "nonsense": false,
	} {
		if got := loopback(addr); got != want {
			t.Errorf("loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestTheEmbeddedDefaultKeepsItsOperatorToken: the serving line says the
// operator token, and the embedded default keeps it in its data directory,
// so a restart keeps the one a browser saved; a fresh directory has a new
// one, and ADMIN_TOKEN still wins, unsaid (issue 41, finding 2).
func TestTheEmbeddedDefaultKeepsItsOperatorToken(t *testing.T) {
	dir := t.TempDir()
	first := startRun(t, "DATA_DIR", dir)
	first.stop(t, 15*time.Second)
	if first.token == "" {
		t.Fatalf("the serving line %q does not say the operator token", first.line)
	}
	if class := "class token " + server.ClassToken(first.token) + " "; !strings.Contains(first.line, class) {
		t.Errorf("the serving line %q does not say the class token (%s)", first.line, class)
	}
	file := filepath.Join(dir, "operator-token")
	if !strings.Contains(first.line, file) {
		t.Errorf("the serving line %q does not say where the token is kept (%s)", first.line, file)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the kept token's file: %v, %v; want mode 0600", fi, err)
	}
	second := startRun(t, "DATA_DIR", dir)
	if second.token != first.token {
		t.Errorf("restarted on the same data directory: token %q, want the first start's %q", second.token, first.token)
	}
	// The token said is the service's: it opens an operator's request.
	req, err := http.NewRequest(http.MethodPost, second.url+"/api/products/1/reconcile", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+second.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode >= 500 {
		t.Errorf("reconciling with the serving line's token: status %d", resp.StatusCode)
	}
	second.stop(t, 15*time.Second)

	fresh := startRun(t, "DATA_DIR", t.TempDir())
	fresh.stop(t, 15*time.Second)
	if fresh.token == "" || fresh.token == first.token {
		t.Errorf("a fresh data directory: token %q, want a new one (not %q)", fresh.token, first.token)
	}
	given := startRun(t, "DATA_DIR", dir, "ADMIN_TOKEN", "the-given-token")
	given.stop(t, 15*time.Second)
	if given.token != "" || strings.Contains(given.line, "the-given-token") || !strings.Contains(given.line, "ADMIN_TOKEN") ||
		!strings.Contains(given.line, server.ClassToken("the-given-token")) {
		t.Errorf("ADMIN_TOKEN set: serving line %q; want it to name ADMIN_TOKEN and not print it, and to say its class token", given.line)
	}
}

// TestStartUpSaysItPlainly: at the default log level the start is the
// serving line and short log lines, with no configuration dump (-v asks
// for it) and no raw refusal of the embedded Redis: its durability is
// said plainly, in the log and in every product's view (issue 41,
// finding 5).
func TestStartUpSaysItPlainly(t *testing.T) {
	s := startRun(t, "LOG_LEVEL", "info", "DATA_DIR", t.TempDir())
	resp, err := http.Get(s.url + "/api/products/1")
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Durability       string `json:"durability"`
		DurabilityReason string `json:"durability_reason"`
	}
	err = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	s.stop(t, 15*time.Second)
	if p.Durability != "none" || p.DurabilityReason != durability.KeepsNothing {
		t.Errorf("the demo product's durability: %q (%q); want none (%q)", p.Durability, p.DurabilityReason, durability.KeepsNothing)
	}
	log := s.log.String()
	for _, raw := range []string{"unknown command", "ERR ", "config="} {
		if strings.Contains(log, raw) {
			t.Errorf("the start-up log says %q:\n%s", raw, log)
		}
	}
	if !strings.Contains(log, durability.KeepsNothing) {
		t.Errorf("the start-up log does not say the durability plainly:\n%s", log)
	}
	if len(s.line) > 320 { // with a temporary directory's long path
		t.Errorf("the serving line is %d characters: %s", len(s.line), s.line)
	}
	verbose := startRun(t, "LOG_LEVEL", "info", "VERBOSE", "true")
	verbose.stop(t, 15*time.Second)
	if !strings.Contains(verbose.log.String(), "config=") {
		t.Errorf("-v: the log has no configuration:\n%s", verbose.log.String())
	}
}

// TestServedAtEveryInterface: listening on every interface, the serving
// line gives URLs that open the page, here and from other machines, not
// the listener's http://[::]:8080 (issue 41, a class on the teacher's
// machine).
func TestServedAtEveryInterface(t *testing.T) {
	addrs := func() ([]net.Addr, error) {
		return []net.Addr{
			&net.IPNet{IP: net.ParseIP("127.0.0.1"), Mask: net.CIDRMask(8, 32)},
			&net.IPNet{IP: net.ParseIP("192.0.2.2"), Mask: net.CIDRMask(24, 32)},
			&net.IPNet{IP: net.ParseIP("fe80::1"), Mask: net.CIDRMask(64, 128)},
			&net.IPNet{IP: net.ParseIP("fd00::2"), Mask: net.CIDRMask(64, 128)},
		}, nil
	}
	for url, want := range map[string]string{
		"http://[::]:8080":       "http://127.0.0.1:8080/ (from other machines: http://192.0.2.2:8080/, http://[fd00::2]:8080/)",
		"http://0.0.0.0:8080":    "http://127.0.0.1:8080/ (from other machines: http://192.0.2.2:8080/, http://[fd00::2]:8080/)",
		"http://127.0.0.1:8080":  "http://127.0.0.1:8080/",
		"http://192.0.2.2:18080": "http://192.0.2.2:18080/",
	} {
		if got := servedAt(url, addrs); got != want {
			t.Errorf("servedAt(%s) = %q, want %q", url, got, want)
		}
	}
	if got := servedAt("http://[::]:8080", func() ([]net.Addr, error) { return nil, errors.New("no interfaces") }); got != "http://127.0.0.1:8080/" {
		t.Errorf("servedAt without interfaces = %q, want the loopback URL alone", got)
	}
}
