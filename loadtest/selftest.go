package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"time"

	"seckill/internal/harness"
)

// helloBody is what the bare handler answers: an order's 201, minus the work.
const helloBody = `{"id":"1","user_id":1,"product_id":1}`

// startHello serves helloBody on a free loopback port until ctx ends.
func startHello(ctx context.Context) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("listening for the hello server: %w", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, helloBody)
	}), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // returns ErrServerClosed on Close
	}()
	return "http://" + ln.Addr().String(), func() { srv.Close(); <-done }, nil
}

// wrkScript makes wrk send the harness's request: the same method, path,
// header and body size.
const wrkScript = `wrk.method = "POST"
wrk.path = "/api/orders"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"user_id":123456,"product_id":1,"lock":"token","mode":"rmw"}'
`

var wrkRate = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)

// selfTest measures the harness's own ceiling: it drives a bare handler
// for a while, then wrk drives the same handler with the same connections;
// the harness should reach at least 80% of wrk, so that it is not what a
// benchmark of the service measures.
func selfTest(ctx context.Context, o options, stdout, stderr io.Writer) error {
	url, stop, err := startHello(ctx)
	if err != nil {
		return err
	}
	defer stop()
	conc := o.spec.Concurrency
	fmt.Fprintf(stdout, "self-test: bare handler at %s, %d connections, %s each, %d CPUs, %s\n",
		url, conc, o.selfDur, runtime.NumCPU(), runtime.Version())

	row, err := harness.Drive(ctx, harness.Spec{
		Targets: []string{url}, Buyers: 1_000_000, Requests: 1 << 30, Concurrency: conc,
		Duration: harness.Duration(o.selfDur), Timeout: harness.Duration(o.selfDur + time.Minute),
		Lock: "token", Mode: "rmw",
	}, nil)
	if err != nil {
		return fmt.Errorf("driving the hello handler: %w", err)
	}
	fmt.Fprintf(stdout, "harness: %.0f req/s (%d requests, %d errors, p50 %.2fms, p99 %.2fms)\n",
		row.RPS, row.Requests, row.Errors, row.P50MS, row.P99MS)

	wrk, err := exec.LookPath("wrk")
	if err != nil {
		fmt.Fprintln(stdout, "wrk: not installed (apt-get install -y wrk), no comparison")
		return nil
	}
	dir, err := os.MkdirTemp("", "loadtest-wrk-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "post.lua")
	if err := os.WriteFile(script, []byte(wrkScript), 0o600); err != nil {
		return err
	}
	threads := min(runtime.NumCPU(), conc)
	cmd := exec.CommandContext(ctx, wrk, "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conc),
		"-d", strconv.Itoa(max(1, int(o.selfDur.Seconds())))+"s", "-s", script, url)
	cmd.Stderr = stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("running wrk: %w", err)
	}
	m := wrkRate.FindSubmatch(out)
	if m == nil {
		return errors.New("wrk printed no Requests/sec:\n" + string(out))
	}
	wrkRPS, _ := strconv.ParseFloat(string(m[1]), 64)
	fmt.Fprintf(stdout, "wrk:     %.0f req/s (%s -t %d -c %d)\n", wrkRPS, wrk, threads, conc)
	verdict := "meets the 80% target"
	if row.RPS < 0.8*wrkRPS {
		verdict = "BELOW the 80% target"
	}
	fmt.Fprintf(stdout, "harness / wrk: %.0f%% — %s\n", 100*row.RPS/wrkRPS, verdict)
	return nil
}
