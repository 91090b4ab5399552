package experiment

import (
	"slices"
	"strings"
	"testing"
)

// TestTableRows: every row has a kind of Kinds, a name unique in its
// namespace (scenarios, drills and benches share -scenario's; lessons have
// their own), what it shows and the verdict expected.
func TestTableRows(t *testing.T) {
	for _, k := range Kinds {
		if len(OfKind(k)) == 0 {
			t.Errorf("no %s in the table", k)
		}
	}
	seen := map[string]Kind{}
	for _, e := range All {
		if !slices.Contains(Kinds, e.Kind) {
			t.Errorf("%s: kind %q is not one of %v", e.Name, e.Kind, Kinds)
		}
		if e.Name == "" || strings.TrimSpace(e.Shows) == "" || strings.TrimSpace(e.Expect) == "" {
			t.Errorf("%s %q: a name, what it shows and the verdict expected are needed", e.Kind, e.Name)
		}
		space := string(e.Kind)
		if e.Kind != Lesson {
			space = "-scenario"
		}
		if k, ok := seen[space+" "+e.Name]; ok {
			t.Errorf("%s %s: the name is already the %s's", e.Kind, e.Name, k)
		}
		seen[space+" "+e.Name] = e.Kind
		if (e.Kind == Scenario || e.Kind == Drill) && e.Summary == "" {
			t.Errorf("%s %s: its runner prints the summary as it starts; it is empty", e.Kind, e.Name)
		}
	}
}

// TestLessonsReachEveryExperiment: every experiment a lesson runs is in
// the table, and every one -scenario takes is run by a lesson; a bench
// behind a flag of its own (-ceiling) is run by its command instead.
func TestLessonsReachEveryExperiment(t *testing.T) {
	reached := map[string]string{}
	for _, l := range OfKind(Lesson) {
		if len(l.Runs) == 0 && !strings.HasPrefix(l.Command, "go test ") {
			t.Errorf("lesson %s runs %q: neither an experiment nor go test", l.Name, l.Command)
		}
		for _, name := range l.Runs {
			if _, ok := Lookup(name); !ok {
				t.Errorf("lesson %s runs %s, which is not in the table", l.Name, name)
			}
			reached[name] = l.Name
		}
	}
	for _, e := range All {
		if e.Kind == Lesson || e.Command != "" {
			continue
		}
		if reached[e.Name] == "" {
			t.Errorf("%s %s is in no lesson of web/static/course.json", e.Kind, e.Name)
		}
	}
}
