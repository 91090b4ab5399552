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

	"seckill/internal/lab/harness"
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

// selfTest measures the harness's own ceiling: it drives a bare handler,
// then wrk drives the same handler with as many connections, in alternating
// rounds so that a machine shared with other work loads both alike; it
// reports each side's median. The harness should reach at least 80% of wrk,
// so that it is not what a benchmark of the service measures.
func selfTest(ctx context.Context, o options, stdout, stderr io.Writer) error {
	url, stop, err := startHello(ctx)
	if err != nil {
		return err
	}
	defer stop()
	conc := o.spec.Concurrency
	fmt.Fprintf(stdout, "self-test: bare handler at %s, %d connections, %d rounds of %s, %d CPUs, %s\n",
		url, conc, o.selfRounds, o.selfDur, runtime.NumCPU(), runtime.Version())

	wrk, err := exec.LookPath("wrk")
	if err != nil {
		fmt.Fprintln(stdout, "wrk: not installed (apt-get install -y wrk), no comparison")
	}
	var script string
	if wrk != "" {
		dir, err := os.MkdirTemp("", "loadtest-wrk-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		script = filepath.Join(dir, "post.lua")
		if err := os.WriteFile(script, []byte(wrkScript), 0o600); err != nil {
			return err
		}
	}
	var ours, theirs []float64
	for round := 1; round <= o.selfRounds; round++ {
		row, err := harness.Drive(ctx, harness.Spec{
			Targets: []string{url}, Buyers: 1_000_000, Requests: 1 << 30, Concurrency: conc,
			Duration: harness.Duration(o.selfDur), Timeout: harness.Duration(o.selfDur + time.Minute),
			Lock: "token", Mode: "rmw",
		}, nil)
		if err != nil {
			return fmt.Errorf("driving the hello handler: %w", err)
		}
		ours = append(ours, row.RPS)
		fmt.Fprintf(stdout, "round %d harness: %.0f req/s (%d requests, %d errors, p50 %.2fms, p99 %.2fms)\n",
			round, row.RPS, row.Requests, row.Errors, row.P50MS, row.P99MS)
		if wrk == "" {
			continue
		}
		rps, err := runWrk(ctx, wrk, script, url, conc, o.selfDur, stderr)
		if err != nil {
			return err
		}
		theirs = append(theirs, rps)
		fmt.Fprintf(stdout, "round %d wrk:     %.0f req/s (wrk -t %d -c %d)\n", round, rps, min(runtime.NumCPU(), conc), conc)
	}
	if wrk == "" {
		fmt.Fprintf(stdout, "harness median: %.0f req/s\n", harness.Median(ours))
		return nil
	}
	h, w := harness.Median(ours), harness.Median(theirs)
	verdict := "meets the 80% target"
	if h < 0.8*w {
		verdict = "BELOW the 80% target"
	}
	fmt.Fprintf(stdout, "median harness %.0f req/s, wrk %.0f req/s: harness / wrk = %.0f%% — %s\n", h, w, 100*h/w, verdict)
	return nil
}

func runWrk(ctx context.Context, wrk, script, url string, conc int, d time.Duration, stderr io.Writer) (float64, error) {
	threads := min(runtime.NumCPU(), conc)
	cmd := exec.CommandContext(ctx, wrk, "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conc),
		"-d", strconv.Itoa(max(1, int(d.Seconds())))+"s", "-s", script, url)
	cmd.Stderr = stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("running wrk: %w", err)
	}
	m := wrkRate.FindSubmatch(out)
	if m == nil {
		return 0, errors.New("wrk printed no Requests/sec:\n" + string(out))
	}
	return strconv.ParseFloat(string(m[1]), 64)
}
