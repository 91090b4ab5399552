package main

import (
	"context"

	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/app"
	"seckill/internal/lab/harness"
	"seckill/internal/testkit/child"
)

// The cluster scenario: the same steps on instances over one Redis of the
// run's own, then over a Redis Cluster of its own, each node's commands
// counted (INFO commandstats) around each pass.

// redisPass is one pass of the cluster scenario: its rows, req/s and the
// commands each node served.
type redisPass struct {
	name  string
	rows  []harness.Row
	calls map[string]map[string]int64 // by node address, then command
}

func (o options) compareCluster(ctx context.Context, getenv func(string) string, sc harness.Scenario, stdout, stderr io.Writer) error {
	if o.targets != "" {
		return fmt.Errorf("scenario %s starts the Redis servers it compares, and instances on each: it takes no -target", sc.Name)
	}
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("scenario %s needs %s on PATH (Debian: apt-get install redis-server): %w", sc.Name, bin, err)
		}
	}
	cfg, err := serviceConfig(getenv, o.lockTTL, o.lockWait, o.spec.AdminToken)
	if err != nil {
		return err
	}
	cfg.RedisAddr, cfg.RedisCluster = "", nil
	o.pickProducts(stderr)
	bar := newProgressBar(stderr)
	rep := harness.Report{Title: "seckill load test: scenario " + sc.Name, Started: time.Now().UTC()}
	fmt.Fprintf(stderr, "scenario %s: %s\n", sc.Name, sc.Summary)

	one, held1, err := o.redisPass(ctx, sc, cfg, "1 node", &rep, bar, stderr)
	if err != nil {
		return o.conclude(rep, err, nil, stdout)
	}
	dir, err := os.MkdirTemp("", "seckill-cluster-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintln(stderr, "starting a Redis Cluster of 6 redis-server (3 masters, a replica each)…")
	procs, err := child.StartCluster(ctx, dir)
	if err != nil {
		return err
	}
	defer procs.Stop()
	cfg.RedisCluster = procs.Addrs()
	o.spec.ProductID += 1_000_000 // the cluster's products apart from the first pass's
	many, held2, err := o.redisPass(ctx, sc, cfg, "cluster", &rep, bar, stderr)
	if err == nil {
		rep.Summary = append(rep.Summary, clusterSummary(one, many)...)
	}
	var unheld error
	if !held1 || !held2 {
		unheld = fmt.Errorf("scenario %s: %w", sc.Name, errExpectation)
	}
	return o.conclude(rep, err, unheld, stdout)
}

// redisPass starts instances on cfg (over a Redis of their own when cfg
// names no cluster), runs sc's steps, and counts each master's commands.
func (o options) redisPass(ctx context.Context, sc harness.Scenario, cfg app.Config, name string,
	rep *harness.Report, bar *progressBar, stderr io.Writer) (redisPass, bool, error) {
	pass := redisPass{name: name}
	fmt.Fprintf(stderr, "%s: starting %d service instance(s)…\n", name, o.instances)
	c, err := startCluster(ctx, max(o.instances, 1), clusterNeeds{ownRedis: len(cfg.RedisCluster) == 0}, cfg, stderr)
	if err != nil {
		return pass, false, err
	}
	defer func() {
		if err := c.stop(); err != nil {
			fmt.Fprintln(stderr, "loadtest: stopping the instances:", err)
		}
	}()
	if rep.Machine.Cores == 0 {
		client := harness.NewClient(1)
		rep.Machine = harness.DetectMachine(ctx, client, c.URLs)
		client.CloseIdleConnections()
	}
	masters, err := passMasters(ctx, c, cfg)
	if err != nil {
		return pass, false, err
	}
	before, err := commandCalls(ctx, masters)
	if err != nil {
		return pass, false, err
	}
	rows, _, held, err := harness.RunScenario(ctx, sc, harness.ScenarioRun{
		Targets:   c.URLs,
		ProductID: o.spec.ProductID,
		Override:  func(s *harness.Spec) { o.override(s) },
		Progress:  func(s harness.Spec, p harness.Progress) { bar.update(name+" "+s.Lock+"/"+s.Mode, p) },
		Done:      func(harness.Row) { bar.finish() },
		Repeat:    o.repeat,
	})
	for i := range rows {
		rows[i].Note = strings.TrimSuffix("redis: "+name+"; "+rows[i].Note, "; ")
	}
	pass.rows = rows
	rep.Rows = append(rep.Rows, rows...)
	if err != nil {
		return pass, held, err
	}
	after, err := commandCalls(ctx, masters)
	if err != nil {
		return pass, held, err
	}
	pass.calls = make(map[string]map[string]int64)
	for addr, cmds := range after {
		pass.calls[addr] = make(map[string]int64)
		for cmd, n := range cmds {
			if d := n - before[addr][cmd]; d > 0 {
				pass.calls[addr][cmd] = d
			}
		}
	}
	return pass, held, nil
}

// passMasters are the Redis masters a pass's instances use.
func passMasters(ctx context.Context, c *cluster, cfg app.Config) ([]string, error) {
	if len(cfg.RedisCluster) == 0 {
		return []string{c.redis.Addr}, nil
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.RedisCluster})
	defer cc.Close()
	ms, err := child.Masters(ctx, cc)
	if err != nil {
		return nil, err
	}
	var out []string
	for addr := range ms {
		out = append(out, addr)
	}
	slices.Sort(out)
	return out, nil
}

// commandCalls reads, per node, the calls of each command it has served
// (INFO commandstats).
func commandCalls(ctx context.Context, nodes []string) (map[string]map[string]int64, error) {
	out := make(map[string]map[string]int64)
	for _, addr := range nodes {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		info, err := rdb.Info(ctx, "commandstats").Result()
		rdb.Close()
		if err != nil {
			return nil, fmt.Errorf("reading INFO commandstats of %s: %w", addr, err)
		}
		out[addr] = parseCalls(info)
	}
	return out, nil
}

// parseCalls reads the calls= of every cmdstat_ line, INFO and the
// client's CLUSTER SLOTS included: a node's whole load.
func parseCalls(info string) map[string]int64 {
	out := make(map[string]int64)
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		_, rest, _ = strings.Cut(rest, "calls=")
		v, _, _ := strings.Cut(rest, ",")
		out[name], _ = strconv.ParseInt(v, 10, 64)
	}
	return out
}

// clusterSummary compares the passes: the throughput of each step on the
// cluster over one node, and each node's share of the commands.
func clusterSummary(one, many redisPass) []string {
	var lines []string
	rps := func(rows []harness.Row) map[string][]float64 {
		m := make(map[string][]float64)
		for _, r := range rows {
			if r.Verdict != harness.Skipped && r.RPS > 0 {
				m[r.Label()] = append(m[r.Label()], r.RPS)
			}
		}
		return m
	}
	a, b := rps(one.rows), rps(many.rows)
	var labels []string
	for _, r := range one.rows {
		if !slices.Contains(labels, r.Label()) {
			labels = append(labels, r.Label())
		}
	}
	for _, l := range labels {
		if len(a[l]) == 0 || len(b[l]) == 0 {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s: cluster / 1 node = %.2f× (median %.0f vs %.0f req/s over %d run(s) each)",
			l, harness.Median(b[l])/harness.Median(a[l]), harness.Median(b[l]), harness.Median(a[l]), min(len(a[l]), len(b[l]))))
	}
	for _, p := range []redisPass{one, many} {
		sums := make(map[string]int64)
		var total int64
		for addr, cmds := range p.calls {
			for _, n := range cmds {
				sums[addr] += n
			}
			total += sums[addr]
		}
		lines = append(lines, fmt.Sprintf("commands served, %s: %d in all", p.name, total))
		for _, addr := range slices.Sorted(maps.Keys(p.calls)) {
			lines = append(lines, fmt.Sprintf("  %s: %d (%.0f%%) — %s", addr, sums[addr],
				100*float64(sums[addr])/float64(max(total, 1)), topCommands(p.calls[addr], 4)))
		}
	}
	return lines
}

// topCommands names the n commands called most, with their calls.
func topCommands(cmds map[string]int64, n int) string {
	names := slices.Collect(maps.Keys(cmds))
	slices.SortFunc(names, func(a, b string) int { return int(cmds[b] - cmds[a]) })
	var parts []string
	for _, c := range names[:min(n, len(names))] {
		parts = append(parts, fmt.Sprintf("%s %d", c, cmds[c]))
	}
	return strings.Join(parts, ", ")
}
