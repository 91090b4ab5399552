package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/lab/harness"
	"seckill/internal/stock"
	"seckill/internal/testkit/child"
)

// The cluster scenario: the same steps on instances over one Redis of the
// run's own, then over Redis Clusters of its own of 3 and 6 masters, each
// master's commands and CPU read (INFO commandstats, INFO cpu) around each
// pass.

// clusterMasters are the masters of the scenario's cluster passes, after
// its pass on one Redis.
var clusterMasters = []int{3, 6}

// redisPass is one pass of the cluster scenario: its rows, and what each
// master served.
type redisPass struct {
	name      string
	rows      []harness.Row
	loads     map[string]nodeLoad // by master address
	purchases int64               // the rows' sales
	shards    map[string]int      // the rows' shards each master holds; nil on one node
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
	if o.set["mode"] && o.modes != "all" {
		// -mode keeps the steps of those modes: each pass's shares and
		// per-purchase cost are then the mode's own.
		sc.Steps = slices.DeleteFunc(slices.Clone(sc.Steps), func(s harness.Step) bool {
			return !slices.Contains(splitList(o.modes), s.Spec.Mode)
		})
		if len(sc.Steps) == 0 {
			return fmt.Errorf("scenario %s runs none of the modes %s", sc.Name, o.modes)
		}
	}
	o.pickProducts(stderr)
	bar := newProgressBar(stderr)
	rep := harness.Report{Title: "seckill load test: scenario " + sc.Name, Started: time.Now().UTC()}
	fmt.Fprintf(stderr, "scenario %s: %s\n", sc.Name, sc.Summary)

	one, held, err := o.redisPass(ctx, sc, cfg, "1 node", &rep, bar, stderr)
	if err != nil {
		return o.conclude(rep, err, nil, stdout)
	}
	passes := []*redisPass{&one}
	for _, m := range clusterMasters {
		o.spec.ProductID += 1_000_000 // each pass's products apart from the others'
		p, ok, err := o.clusterPass(ctx, sc, cfg, m, &rep, bar, stderr)
		held = held && ok
		if err != nil {
			return o.conclude(rep, err, nil, stdout)
		}
		passes = append(passes, &p)
	}
	rep.Summary = append(rep.Summary, clusterSummary(passes)...)
	rep.Shares = masterShares(passes)
	var unheld error
	if !held {
		unheld = fmt.Errorf("scenario %s: %w", sc.Name, errExpectation)
	}
	return o.conclude(rep, nil, unheld, stdout)
}

// clusterPass starts a Redis Cluster of masters masters (a replica each),
// runs a pass on it and stops it.
func (o options) clusterPass(ctx context.Context, sc harness.Scenario, cfg app.Config, masters int,
	rep *harness.Report, bar *progressBar, stderr io.Writer) (redisPass, bool, error) {
	dir, err := os.MkdirTemp("", "seckill-cluster-")
	if err != nil {
		return redisPass{}, false, err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(stderr, "starting a Redis Cluster of %d redis-server (%d masters, a replica each)…\n", 2*masters, masters)
	procs, err := child.StartClusterOf(ctx, dir, masters)
	if err != nil {
		return redisPass{}, false, err
	}
	defer procs.Stop()
	cfg.RedisCluster = procs.Addrs()
	return o.redisPass(ctx, sc, cfg, fmt.Sprintf("%d masters", masters), rep, bar, stderr)
}

// redisPass starts instances on cfg (over a Redis of their own when cfg
// names no cluster), runs sc's steps, and reads what each master served.
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
	var cc *redis.ClusterClient
	masters := []string{}
	if len(cfg.RedisCluster) == 0 {
		masters = append(masters, c.redis.Addr)
	} else {
		cc = redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.RedisCluster})
		defer cc.Close()
		ms, err := child.Masters(ctx, cc)
		if err != nil {
			return pass, false, err
		}
		masters = slices.Sorted(maps.Keys(ms))
	}
	before, err := readLoads(ctx, masters)
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
		rows[i].Masters = len(masters) // the report's curves against the masters
		pass.purchases += int64(rows[i].OK)
	}
	pass.rows = rows
	rep.Rows = append(rep.Rows, rows...)
	if err != nil {
		return pass, held, err
	}
	after, err := readLoads(ctx, masters)
	if err != nil {
		return pass, held, err
	}
	pass.loads = loadDelta(before, after)
	if cc != nil {
		if pass.shards, err = shardsHeld(ctx, cc, rows); err != nil {
			return pass, held, err
		}
	}
	return pass, held, nil
}

// shardsHeld counts, per master, the stock shards of the rows' products
// whose slot it serves: a shard's keys share its hash tag, {P_k}, and so
// its slot, which CRC16 picks with no regard to the other shards'.
func shardsHeld(ctx context.Context, cc *redis.ClusterClient, rows []harness.Row) (map[string]int, error) {
	ms, err := child.Masters(ctx, cc)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int)
	for addr := range ms {
		out[addr] = 0
	}
	for _, r := range rows {
		shards := cmp.Or(r.Shards, api.DefaultShards)
		l := stock.Layout{ID: r.ProductID, Shards: shards}
		for k := range shards {
			slot, err := cc.ClusterKeySlot(ctx, l.StockKey(k)).Result()
			if err != nil {
				return nil, fmt.Errorf("reading the slot of %s: %w", l.StockKey(k), err)
			}
			for addr, ranges := range ms {
				for _, sr := range ranges {
					if slot >= sr[0] && slot <= sr[1] {
						out[addr]++
					}
				}
			}
		}
	}
	return out, nil
}

// clusterSummary compares the passes: the throughput of each step on each
// cluster over one node, then each pass's scale figures.
func clusterSummary(passes []*redisPass) []string {
	var lines []string
	// A step's label, the masters left out: the same step in every pass.
	step := func(r harness.Row) string { r.Masters = 0; return r.Label() }
	rps := func(rows []harness.Row) map[string][]float64 {
		m := make(map[string][]float64)
		for _, r := range rows {
			if r.Verdict != harness.Skipped && r.RPS > 0 {
				m[step(r)] = append(m[step(r)], r.RPS)
			}
		}
		return m
	}
	one := passes[0]
	a := rps(one.rows)
	var labels []string
	for _, r := range one.rows {
		if !slices.Contains(labels, step(r)) {
			labels = append(labels, step(r))
		}
	}
	for _, p := range passes[1:] {
		b := rps(p.rows)
		for _, l := range labels {
			if len(a[l]) == 0 || len(b[l]) == 0 {
				continue
			}
			lines = append(lines, fmt.Sprintf("%s: %s / 1 node = %.2f× on this machine (median %.0f vs %.0f req/s over %d run(s) each)",
				l, p.name, harness.Median(b[l])/harness.Median(a[l]), harness.Median(b[l]), harness.Median(a[l]), min(len(a[l]), len(b[l]))))
		}
	}
	for _, p := range passes {
		lines = append(lines, sharesLines(p, one)...)
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
