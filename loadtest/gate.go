package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"time"

	"seckill/internal/api"
	"seckill/internal/gate"
	"seckill/internal/lab/harness"
)

// gateBench runs two service processes behind the sold-out gate (Debian's
// nginx with Lua, internal/gate.StartNginx) and compares, in alternating
// rounds, the sold-out refusals answered by the gate, by the service
// through a plain nginx proxy, and by the service directly. With -requests
// or -rate it then runs that workload through the gate and directly to the
// replicas, each on a fresh product, and says who answered the refusals.
func gateBench(ctx context.Context, o options, getenv func(string) string, stdout, stderr io.Writer) error {
	control, err := gate.FreeAddr()
	if err != nil {
		return err
	}
	plain, err := gate.FreeAddr()
	if err != nil {
		return err
	}
	cfg, err := serviceConfig(getenv, o.lockTTL, o.lockWait, o.spec.AdminToken)
	if err != nil {
		return err
	}
	cfg.GateURLs, cfg.GateSecret = []string{"http://" + control}, rand.Text()
	c, err := startCluster(ctx, 2, clusterNeeds{}, cfg, stderr)
	if err != nil {
		return err
	}
	defer func() {
		if serr := c.stop(); serr != nil {
			fmt.Fprintln(stderr, "loadtest: stopping the service:", serr)
		}
	}()
	ng, err := gate.StartNginx(ctx, gate.NginxOptions{Upstreams: c.URLs, Control: control, Plain: plain,
		Secret: cfg.GateSecret, Workers: runtime.NumCPU(), Stderr: stderr})
	if err != nil {
		return err
	}
	defer ng.Stop()

	client := harness.NewClient(1)
	defer client.CloseIdleConnections()
	rep := harness.Report{Title: "seckill sold-out gate", Started: time.Now().UTC(),
		Machine: harness.DetectMachine(ctx, client, c.URLs)}
	for _, l := range rep.MachineLines() {
		fmt.Fprintln(stdout, l)
	}
	product := o.spec.ProductID
	if product == 0 {
		product = 1_000_000 + mrand.Int64N(1_000_000_000)
	}
	conc := o.spec.Concurrency
	fmt.Fprintf(stdout, "sold-out gate: nginx %s (%d workers) in front of %v; %d connections, %d rounds of %s\n",
		ng.URL, runtime.NumCPU(), c.URLs, conc, o.selfRounds, o.selfDur)

	// A product with no stock: each replica's first refusal sets its flag,
	// and the gate learns from the first that passes through it.
	if err := resetProduct(ctx, client, c.URLs[0], product, 0, api.ModeAsync, o.spec.AdminToken); err != nil {
		return err
	}
	for _, u := range append([]string{ng.URL}, c.URLs...) {
		if _, err := buyOnce(ctx, client, u, product, 1); err != nil {
			return err
		}
	}
	if err := gateRefusals(ctx, stdout, client, ng, c, cfg.GateSecret, o, product); err != nil {
		return err
	}
	if !o.set["requests"] && !o.set["rate"] {
		return nil
	}
	return gateWorkloads(ctx, stdout, stderr, client, ng, c, cfg.GateSecret, o, product)
}

// gateRefusals drives the sold-out product through the gate, through
// nginx alone and to the service directly, round after round, and prints
// each side's refusals per second and their medians.
func gateRefusals(ctx context.Context, stdout io.Writer, client *http.Client, ng *gate.Nginx, c *cluster, secret string, o options, product int64) error {
	conc := o.spec.Concurrency
	sides := []ceilingSide{{name: "gate (nginx+Lua)"}, {name: "nginx → service"}, {name: "service direct"}}
	targets := [][]string{{ng.URL}, {ng.PlainURL}, c.URLs}
	for round := range o.selfRounds {
		for i := range sides {
			before, err := gateAnswered(ctx, client, ng, secret)
			if err != nil {
				return err
			}
			row, err := harness.Drive(ctx, harness.Spec{Targets: targets[i], ProductID: product, Buyers: 1 << 30,
				Concurrency: conc, Duration: harness.Duration(o.selfDur), Timeout: harness.Duration(o.selfDur + time.Minute)}, nil)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, sides[i].name, err)
			}
			if row.SoldOut != row.Requests {
				return fmt.Errorf("round %d, %s: %d of %d requests were not refused sold_out (%v)",
					round+1, sides[i].name, row.Requests-row.SoldOut, row.Requests, row.ErrorSamples)
			}
			after, err := gateAnswered(ctx, client, ng, secret)
			if err != nil {
				return err
			}
			sides[i].rps = append(sides[i].rps, row.RPS)
			fmt.Fprintf(stdout, "round %d %-19s %7.0f refusals/s (%d requests, %d answered by the gate, p50 %.2fms, p99 %.2fms)\n",
				round+1, sides[i].name+":", row.RPS, row.Requests, after-before, row.P50MS, row.P99MS)
		}
	}
	fmt.Fprintf(stdout, "medians over %d rounds:\n", o.selfRounds)
	g := harness.Median(sides[0].rps)
	for _, sd := range sides {
		m := harness.Median(sd.rps)
		fmt.Fprintf(stdout, "  %-19s %7.0f refusals/s; the gate answers %.2f× as many\n", sd.name, m, g/max(m, 1))
	}
	return nil
}

// gateWorkloads runs the workload -requests or -rate asked for twice, on
// products of their own: through the gate and to the replicas directly,
// and prints who answered the sold_out refusals.
func gateWorkloads(ctx context.Context, stdout, stderr io.Writer, client *http.Client, ng *gate.Nginx, c *cluster, secret string, o options, product int64) error {
	mode := o.modes
	if !o.set["mode"] {
		mode = api.ModeAsync
	}
	for i, side := range []struct {
		name    string
		targets []string
	}{{"through the gate", []string{ng.URL}}, {"to the replicas directly", c.URLs}} {
		s := o.spec
		s.Targets, s.Mode, s.Lock = side.targets, mode, "none"
		s.ProductID = product + 1 + int64(i)
		before, err := gateAnswered(ctx, client, ng, secret)
		if err != nil {
			return err
		}
		svcBefore, err := soldOutCount(ctx, client, c.URLs)
		if err != nil {
			return err
		}
		bar := newProgressBar(stderr)
		row, err := harness.Run(ctx, s, func(p harness.Progress) { bar.update(side.name, p) })
		bar.finish()
		if err != nil {
			return fmt.Errorf("the workload %s: %w", side.name, err)
		}
		after, _ := gateAnswered(ctx, client, ng, secret)
		svcAfter, _ := soldOutCount(ctx, client, c.URLs)
		fmt.Fprintf(stdout, "workload %s (mode %s, %d units, rate %.0f/s): verdict %s, %d orders; %d requests in %.1fs = %.0f req/s "+
			"(p50 %.2fms, p99 %.2fms); %d sales, %d sold_out: %d answered by the gate, %d by the service; errors %d; drain %.1fs, 202-to-row p99 %.0fms\n",
			side.name, mode, s.Stock, s.Rate, row.Verdict, row.Sold, row.Requests, row.ElapsedS, row.RPS, row.P50MS, row.P99MS,
			row.OK, row.SoldOut, after-before, svcAfter-svcBefore, row.Errors, row.DrainS, row.DrainP99MS)
	}
	return nil
}

// resetProduct creates or resets a lab product sold in mode with no lock
// (a lab product: the harness names its lock and mode in each request).
func resetProduct(ctx context.Context, c *http.Client, base string, id int64, stock int, mode, token string) error {
	body, _ := json.Marshal(api.ProductRequest{ID: &id, Stock: &stock, Mode: mode, Lock: "none", Lab: true})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/products", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", api.MediaType)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("resetting product %d: %w", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("resetting product %d: %s %s", id, resp.Status, b)
	}
	return nil
}

func buyOnce(ctx context.Context, c *http.Client, base string, product, user int64) (int, error) {
	body, _ := json.Marshal(api.OrderRequest{UserID: &user, ProductID: &product})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/orders", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", api.MediaType)
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("buying product %d at %s: %w", product, base, err)
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// gateAnswered reads how many purchases the gate refused itself.
func gateAnswered(ctx context.Context, c *http.Client, ng *gate.Nginx, secret string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ng.ControlURL+api.GateStatePath, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set(api.HeaderGateSecret, secret)
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("reading the gate's state: %w", err)
	}
	defer resp.Body.Close()
	var st api.GateState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, fmt.Errorf("reading the gate's state: %w", err)
	}
	return st.Answered, nil
}

// soldOutCount sums the replicas' seckill_sold_out_total.
func soldOutCount(ctx context.Context, c *http.Client, urls []string) (int64, error) {
	var n int64
	for _, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/metrics", nil)
		if err != nil {
			return 0, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, fmt.Errorf("reading %s's metrics: %w", u, err)
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "seckill_sold_out_total "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				n += int64(f)
			}
		}
		resp.Body.Close()
	}
	return n, nil
}
