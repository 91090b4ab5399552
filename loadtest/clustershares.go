package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"seckill/internal/lab/harness"
)

// The arithmetic of the cluster scenario's scale figures (issue 22, item 3):
// what each master served over a pass, its share of the masters' load, and
// the speed-up that share predicts when each master has a machine of its
// own. On one machine the masters share its cores, so their req/s cannot
// say how the cluster scales; their shares of the work can.

// nodeLoad is what one master served over a pass.
type nodeLoad struct {
	// calls are the purchase path's commands, by name (INFO commandstats
	// deltas, the commands of the clients' upkeep left out: adminCommand).
	calls map[string]int64
	// cpu is the server's CPU seconds, system and user (INFO cpu deltas).
	cpu float64
}

// commands is the load's commands in all.
func (l nodeLoad) commands() int64 {
	var n int64
	for _, c := range l.calls {
		n += c
	}
	return n
}

// adminCommand reports whether a command (INFO commandstats' name, a
// subcommand after "|") is the clients' and the harness's upkeep rather
// than a purchase's: the slot map, the handshake, INFO itself.
func adminCommand(name string) bool {
	base, _, _ := strings.Cut(name, "|")
	switch base {
	case "info", "cluster", "hello", "client", "ping", "command", "config", "readonly", "select", "auth":
		return true
	}
	return false
}

// readLoads reads, per node, INFO commandstats and INFO cpu: the totals
// since the server started, which two readings turn into a pass's load
// (loadDelta).
func readLoads(ctx context.Context, nodes []string) (map[string]nodeLoad, error) {
	out := make(map[string]nodeLoad)
	for _, addr := range nodes {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		info, err := rdb.Info(ctx, "commandstats", "cpu").Result()
		rdb.Close()
		if err != nil {
			return nil, fmt.Errorf("reading INFO commandstats and cpu of %s: %w", addr, err)
		}
		out[addr] = parseLoad(info)
	}
	return out, nil
}

// parseLoad reads the calls= of every cmdstat_ line but the upkeep's, and
// used_cpu_sys plus used_cpu_user.
func parseLoad(info string) nodeLoad {
	l := nodeLoad{calls: make(map[string]int64)}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		if name, isCmd := strings.CutPrefix(key, "cmdstat_"); isCmd {
			if adminCommand(name) {
				continue
			}
			_, rest, _ := strings.Cut(val, "calls=")
			v, _, _ := strings.Cut(rest, ",")
			l.calls[name], _ = strconv.ParseInt(v, 10, 64)
			continue
		}
		if key == "used_cpu_sys" || key == "used_cpu_user" {
			s, _ := strconv.ParseFloat(val, 64)
			l.cpu += s
		}
	}
	return l
}

// loadDelta is what each node served between two readings.
func loadDelta(before, after map[string]nodeLoad) map[string]nodeLoad {
	out := make(map[string]nodeLoad)
	for addr, a := range after {
		b := before[addr]
		d := nodeLoad{calls: make(map[string]int64), cpu: a.cpu - b.cpu}
		for cmd, n := range a.calls {
			if n -= b.calls[cmd]; n > 0 {
				d.calls[cmd] = n
			}
		}
		out[addr] = d
	}
	return out
}

// passShares is each master's share of a pass's commands and of its
// masters' CPU; a share is 0 when the pass measured nothing.
type passShares struct {
	commands, cpu map[string]float64
	// totals over the masters
	totalCommands int64
	totalCPU      float64
}

func shares(loads map[string]nodeLoad) passShares {
	s := passShares{commands: make(map[string]float64), cpu: make(map[string]float64)}
	for _, l := range loads {
		s.totalCommands += l.commands()
		s.totalCPU += l.cpu
	}
	for addr, l := range loads {
		if s.totalCommands > 0 {
			s.commands[addr] = float64(l.commands()) / float64(s.totalCommands)
		}
		if s.totalCPU > 0 {
			s.cpu[addr] = l.cpu / s.totalCPU
		}
	}
	return s
}

// speedUp is the throughput the masters reach, each on a machine of its
// own, over what one of them reaches carrying all the load: the busiest
// master is full first, when the whole carries 1/its share. 0 when
// nothing was measured.
func speedUp(share map[string]float64) float64 {
	largest := 0.0
	for _, v := range share {
		largest = max(largest, v)
	}
	if largest == 0 {
		return 0
	}
	return 1 / largest
}

// againstOne is the purchases per second the busiest master of a pass
// carries, each master on a machine of its own, over what one Redis
// carries: one Redis is full at 1/perPurchaseOne purchases a unit of its
// capacity, the busiest master at 1/(largest share × perPurchase). Unlike
// speedUp, it counts what a purchase costs more on a cluster. 0 when
// either was not measured.
func againstOne(perPurchaseOne, perPurchase float64, share map[string]float64) float64 {
	s := speedUp(share)
	if perPurchaseOne == 0 || perPurchase == 0 || s == 0 {
		return 0
	}
	return s * perPurchaseOne / perPurchase
}

// sharesLines prints a pass's scale figures: per master its shares, the
// shards it holds and its commands called most; then the predicted
// speed-up, and the same against the one-node pass one (nil: none).
func sharesLines(p, one *redisPass) []string {
	s := shares(p.loads)
	lines := []string{fmt.Sprintf("scale, %s: %d purchases; each master's share of the purchase path's commands "+
		"(INFO commandstats) and of the masters' CPU (INFO cpu, sys+user):", p.name, p.purchases)}
	for _, addr := range slices.Sorted(maps.Keys(p.loads)) {
		l := p.loads[addr]
		held := ""
		if p.shards != nil {
			held = fmt.Sprintf(", %d shards", p.shards[addr])
		}
		lines = append(lines, fmt.Sprintf("  %s: commands %4.1f%% (%d), CPU %4.1f%% (%.2fs)%s — %s", addr,
			100*s.commands[addr], l.commands(), 100*s.cpu[addr], l.cpu, held, topCommands(l.calls, 4)))
	}
	lines = append(lines, fmt.Sprintf("  predicted speed-up on separate machines = 1 / largest share: %.2f× by commands, %.2f× by CPU",
		speedUp(s.commands), speedUp(s.cpu)))
	if p.purchases == 0 {
		return lines
	}
	cmdPer, cpuPer := float64(s.totalCommands)/float64(p.purchases), 1e6*s.totalCPU/float64(p.purchases)
	line := fmt.Sprintf("  per purchase: %.1f commands, %.0f µs of master CPU", cmdPer, cpuPer)
	if one != nil && one != p && one.purchases > 0 {
		o := shares(one.loads)
		oneCmd, oneCPU := float64(o.totalCommands)/float64(one.purchases), 1e6*o.totalCPU/float64(one.purchases)
		line += fmt.Sprintf(" (1 node: %.1f, %.0f µs); the busiest master full, against one Redis full: %.2f× by commands, %.2f× by CPU",
			oneCmd, oneCPU, againstOne(oneCmd, cmdPer, s.commands), againstOne(oneCPU, cpuPer, s.cpu))
	}
	return append(lines, line)
}

// masterShares are the passes' shares for the HTML report, masters in
// address order.
func masterShares(passes []*redisPass) []harness.MasterShares {
	var out []harness.MasterShares
	for _, p := range passes {
		sh := shares(p.loads)
		m := harness.MasterShares{Masters: len(p.loads)}
		for _, addr := range slices.Sorted(maps.Keys(p.loads)) {
			m.Commands = append(m.Commands, sh.commands[addr])
			m.CPU = append(m.CPU, sh.cpu[addr])
		}
		out = append(out, m)
	}
	return out
}
