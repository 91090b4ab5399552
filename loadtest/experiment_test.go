package main

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"seckill/internal/lab/experiment"
	"seckill/internal/lab/harness"
)

// TestListPrintsEveryExperiment: -list prints a header and one line per
// row of the table, each with its kind, name, what it shows and the
// verdict expected, and runs nothing.
func TestListPrintsEveryExperiment(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"loadtest", "-list"}, func(string) string { return "" }, nil, &stdout, &stderr); err != nil {
		t.Fatalf("-list: %v (%s)", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(lines) != len(experiment.All)+1 {
		t.Fatalf("-list printed %d lines, want a header and %d rows:\n%s", len(lines), len(experiment.All), stdout.String())
	}
	counts := map[experiment.Kind]int{}
	for _, e := range experiment.All {
		prefix := fmt.Sprintf("%s %s ", e.Kind, e.Name)
		i := slices.IndexFunc(lines[1:], func(l string) bool {
			return strings.HasPrefix(strings.Join(strings.Fields(l), " ")+" ", prefix) &&
				strings.Contains(l, e.Shows) && strings.HasSuffix(l, e.Expect)
		})
		if i < 0 {
			t.Errorf("-list has no line %q… showing %q and expecting %q", prefix, e.Shows, e.Expect)
		}
		counts[e.Kind]++
	}
	t.Logf("-list: %d lines, %v", len(lines)-1, counts)
}

// TestEveryExperimentDispatches: every scenario row runs a harness preset,
// every drill row a drill and every bench row a bench of this command,
// and every drill and bench here has its row; a drill's row expects every
// verdict its variants want.
func TestEveryExperimentDispatches(t *testing.T) {
	for _, e := range experiment.All {
		switch e.Kind {
		case experiment.Scenario:
			if _, err := harness.LookupScenario(e.Name); err != nil {
				t.Errorf("scenario %s: %v", e.Name, err)
			}
		case experiment.Drill:
			d := lookupDrill(e.Name)
			if d == nil {
				t.Errorf("drill %s: no drill of that name in lockDrills", e.Name)
				continue
			}
			for _, v := range d.Variants {
				if !strings.Contains(e.Expect, v.Name+" "+v.Want) {
					t.Errorf("drill %s: variant %q wants %s; the row expects %q", e.Name, v.Name, v.Want, e.Expect)
				}
			}
		case experiment.Bench:
			if lookupBench(e.Name) == nil {
				t.Errorf("bench %s: no bench of that name in benches", e.Name)
			}
		}
	}
	for _, d := range lockDrills {
		if e, ok := experiment.Lookup(d.Name); !ok || e.Kind != experiment.Drill {
			t.Errorf("drill %s has no drill row in the experiments table", d.Name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(benches)) {
		if e, ok := experiment.Lookup(name); !ok || e.Kind != experiment.Bench {
			t.Errorf("bench %s has no bench row in the experiments table", name)
		}
	}
	for _, o := range []options{{selftest: true, scenario: "selftest"}, {ceiling: true, scenario: "ceiling"}, {gate: true, scenario: "gate"}} {
		got := o.bench()
		o.selftest, o.ceiling, o.gate = false, false, false
		if want := o.bench(); got == nil || reflect.ValueOf(got).Pointer() != reflect.ValueOf(want).Pointer() {
			t.Errorf("-%s runs no bench, or another than -scenario %s", o.scenario, o.scenario)
		}
	}
}
