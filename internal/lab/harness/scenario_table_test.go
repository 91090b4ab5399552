package harness

import (
	"slices"
	"strings"
	"testing"

	"seckill/internal/lab/experiment"
)

// TestScenariosAreTheTablesRows: every scenario row of the experiments
// table runs a preset here, every preset has its row, and Scenarios are
// the rows' order and summaries; a row's Expect names every verdict its
// steps expect, so that -list does not promise what the runs do not check.
func TestScenariosAreTheTablesRows(t *testing.T) {
	rows := experiment.OfKind(experiment.Scenario)
	if len(rows) == 0 {
		t.Fatal("the experiments table has no scenario rows")
	}
	for _, p := range presets {
		if !slices.ContainsFunc(rows, func(e experiment.Experiment) bool { return e.Name == p.Name }) {
			t.Errorf("preset %s has no scenario row in experiment.All", p.Name)
		}
	}
	if len(Scenarios) != len(rows) {
		t.Errorf("%d scenarios, %d scenario rows", len(Scenarios), len(rows))
	}
	for i, e := range rows {
		sc, err := LookupScenario(e.Name)
		if err != nil {
			t.Errorf("row %s dispatches to no preset: %v", e.Name, err)
			continue
		}
		if i < len(Scenarios) && Scenarios[i].Name != e.Name {
			t.Errorf("Scenarios[%d] is %s, the table's row %s", i, Scenarios[i].Name, e.Name)
		}
		if sc.Summary == "" || sc.Summary != e.Summary {
			t.Errorf("scenario %s: summary %q, the row's %q", e.Name, sc.Summary, e.Summary)
		}
		for _, s := range sc.Steps {
			if s.Expect == nil {
				continue
			}
			for _, v := range s.Expect(s.Spec.Lock) {
				if !strings.Contains(e.Expect, v) {
					t.Errorf("scenario %s: a step expects %s, which the row's Expect %q does not name", e.Name, v, e.Expect)
				}
			}
		}
	}
}
