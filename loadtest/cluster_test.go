package main

import (
	"bytes"
	"math"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"seckill/internal/lab/harness"
	"seckill/internal/testkit"
	"seckill/internal/testkit/testenv"
)

// info is an INFO commandstats and cpu reply as Redis 7 sends it.
func info(cmds map[string]int64, sys, user float64) string {
	var b strings.Builder
	b.WriteString("# Commandstats\r\n")
	for name, n := range cmds {
		b.WriteString("cmdstat_" + name + ":calls=" + strconv.FormatInt(n, 10) + ",usec=10,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n")
	}
	b.WriteString("\r\n# CPU\r\n")
	b.WriteString("used_cpu_sys:" + strconv.FormatFloat(sys, 'f', 6, 64) + "\r\n")
	b.WriteString("used_cpu_user:" + strconv.FormatFloat(user, 'f', 6, 64) + "\r\n")
	// Neither the children's CPU nor the main thread's (a part of the
	// whole) is the server's CPU a second time.
	b.WriteString("used_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n")
	b.WriteString("used_cpu_sys_main_thread:9.000000\r\nused_cpu_user_main_thread:9.000000\r\n")
	return b.String()
}

// Each master's share of the purchase path's commands and CPU, from two
// readings of INFO, and the speed-ups they predict: the upkeep's commands
// (INFO, the slot map, the handshake) are no purchase's.
func TestClusterShares(t *testing.T) {
	before := map[string]nodeLoad{
		"a": parseLoad(info(map[string]int64{"evalsha": 100, "info": 5}, 0.5, 0.5)),
		"b": parseLoad(info(map[string]int64{}, 0, 0)),
		"c": parseLoad(info(map[string]int64{"get": 50}, 0.25, 0)),
	}
	after := map[string]nodeLoad{
		"a": parseLoad(info(map[string]int64{"evalsha": 600, "get": 100, "info": 9, "cluster|slots": 3, "hello": 2}, 1.0, 1.0)),
		"b": parseLoad(info(map[string]int64{"evalsha": 300, "client|setinfo": 4}, 1.0, 0.5)),
		"c": parseLoad(info(map[string]int64{"get": 150}, 0.5, 0.25)),
	}
	loads := loadDelta(before, after)
	for addr, want := range map[string]struct {
		commands int64
		cpu      float64
	}{"a": {600, 1.0}, "b": {300, 1.5}, "c": {100, 0.5}} {
		if got := loads[addr]; got.commands() != want.commands || math.Abs(got.cpu-want.cpu) > 1e-9 {
			t.Errorf("%s served %d commands (%v) in %.3fs of CPU, want %d in %.3fs", addr, got.commands(), got.calls, got.cpu, want.commands, want.cpu)
		}
	}
	s := shares(loads)
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %.4f, want %.4f", name, got, want)
		}
	}
	near("a's share of the commands", s.commands["a"], 0.6)
	near("b's share of the CPU", s.cpu["b"], 0.5)
	near("speed-up by commands", speedUp(s.commands), 1/0.6)
	near("speed-up by CPU", speedUp(s.cpu), 2)
	// One Redis: 10 commands a purchase; this cluster: 12.5, of which the
	// busiest master serves 60%.
	near("against one Redis", againstOne(10, 12.5, s.commands), 1/0.6*10/12.5)
	near("speed-up of nothing measured", speedUp(shares(nil).commands), 0)
	near("against one Redis, nothing measured", againstOne(0, 12.5, s.commands), 0)

	one := &redisPass{name: "1 node", purchases: 100, loads: map[string]nodeLoad{"x": {calls: map[string]int64{"evalsha": 1000}, cpu: 3}}}
	three := &redisPass{name: "3 masters", purchases: 80, loads: loads, shards: map[string]int{"a": 3, "b": 2, "c": 1}}
	out := strings.Join(sharesLines(three, one), "\n")
	for _, want := range []string{"a: commands 60.0% (600), CPU 33.3% (1.00s), 3 shards", "1.67× by commands, 2.00× by CPU",
		"per purchase: 12.5 commands, 37500 µs of master CPU (1 node: 10.0, 30000 µs)", "against one Redis full: 1.33× by commands, 1.60× by CPU"} {
		if !strings.Contains(out, want) {
			t.Errorf("the lines lack %q:\n%s", want, out)
		}
	}
}

// The cluster scenario runs its steps on one Redis, on 3 masters and on 6,
// every run SAFE, and prints each pass's shares and predicted speed-up.
func TestClusterScenario(t *testing.T) {
	env := clusterScenarioEnv(t)
	rep, _, err := runCommand(t, func(k string) string { return env[k] }, "-scenario", "cluster",
		"-stock", "150", "-buyers", "150", "-concurrency", "10", "-product", strconv.FormatInt(testenv.ProductID(t), 10))
	if err != nil {
		t.Fatalf("-scenario cluster: %v", err)
	}
	if len(rep.Rows) != 9 {
		t.Fatalf("%d rows, want 3 steps on each of 3 passes", len(rep.Rows))
	}
	for _, r := range rep.Rows {
		if r.Verdict != harness.Safe || r.OK != 150 {
			t.Errorf("%s (%s): %s, %d sold; want SAFE, 150", r.Label(), r.Note, r.Verdict, r.OK)
		}
	}
	summary := strings.Join(rep.Summary, "\n")
	for _, want := range []string{"none/async 6sh: 3 masters / 1 node = ", "none/async 6sh: 6 masters / 1 node = ",
		"scale, 1 node: 450 purchases", "scale, 3 masters: 450 purchases", "scale, 6 masters: 450 purchases",
		"by commands", "by CPU", "against one Redis full"} {
		if !strings.Contains(summary, want) {
			t.Errorf("the summary lacks %q", want)
		}
	}
	// 1 node: one master, all the load; 6 masters: six lines of shares.
	if n := strings.Count(summary, "speed-up on separate machines = 1 / largest share: 1.00× by commands, 1.00× by CPU"); n < 1 {
		t.Errorf("the one node's predicted speed-up is not 1×:\n%s", summary)
	}
	if n := strings.Count(summary, " shards — "); n != 9 {
		t.Errorf("%d masters with their shards counted, want 3+6:\n%s", n, summary)
	}
	// The HTML report's curves against the masters, a series per step, and
	// each pass's shares, summing to one.
	var masters *harness.Curve
	for _, c := range rep.Curves() {
		if c.ID == "masters" {
			masters = &c
		}
	}
	if masters == nil || len(masters.Series) != 3 {
		t.Fatalf("curves against the masters: %+v, want one per step", masters)
	}
	for _, s := range masters.Series {
		if len(s.Points) != 3 || s.Points[0].X != 1 || s.Points[1].X != 3 || s.Points[2].X != 6 {
			t.Errorf("%s against the masters: %+v, want 1, 3 and 6", s.Label, s.Points)
		}
	}
	if len(rep.Shares) != 3 {
		t.Fatalf("shares of %d passes, want 3", len(rep.Shares))
	}
	for i, sh := range rep.Shares {
		var sum float64
		for _, v := range sh.Commands {
			sum += v
		}
		if want := []int{1, 3, 6}[i]; sh.Masters != want || len(sh.Commands) != want || len(sh.CPU) != want || sum < 0.999 || sum > 1.001 {
			t.Errorf("pass %d's shares %+v: want %d masters, commands summing to 1", i, sh, want)
		}
	}
}

// -mode keeps the cluster scenario's steps of that mode: a pass's shares
// and per-purchase cost are then the mode's own.
func TestClusterScenarioOneMode(t *testing.T) {
	env := clusterScenarioEnv(t)
	rep, _, err := runCommand(t, func(k string) string { return env[k] }, "-scenario", "cluster", "-mode", "async",
		"-stock", "60", "-buyers", "60", "-concurrency", "10", "-product", strconv.FormatInt(testenv.ProductID(t), 10))
	if err != nil {
		t.Fatalf("-scenario cluster -mode async: %v", err)
	}
	if len(rep.Rows) != 3 {
		t.Fatalf("%d rows, want the async step on each of 3 passes", len(rep.Rows))
	}
	for _, r := range rep.Rows {
		if r.Mode != "async" || r.Verdict != harness.Safe || r.OK != 60 {
			t.Errorf("%s (%s): %s, %d sold; want async, SAFE, 60", r.Label(), r.Note, r.Verdict, r.OK)
		}
	}
	var stdout, stderr bytes.Buffer
	err = run(t.Context(), []string{"loadtest", "-scenario", "cluster", "-mode", "db"}, func(k string) string { return env[k] },
		strings.NewReader(""), &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "runs none of the modes db") {
		t.Errorf("-scenario cluster -mode db: %v; want it to say the scenario runs no db step", err)
	}
}

// clusterScenarioEnv is the environment of a run of the cluster scenario:
// the operator token, and a database of the test's own on MYSQL_DSN's
// server when it names one. The test is skipped without redis-server and
// redis-cli, which the scenario starts in cluster mode.
func clusterScenarioEnv(t *testing.T) map[string]string {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			testkit.Skipf(t, testkit.NoRedisServer, "the scenario starts redis-server processes in cluster mode, and %s is not on PATH", bin)
		}
	}
	env := map[string]string{"ADMIN_TOKEN": testenv.AdminToken}
	if dsn := os.Getenv("MYSQL_DSN"); dsn != "" {
		env["MYSQL_DSN"] = testenv.Database(t, dsn)
	}
	return env
}
