package main

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"seckill/internal/lab/harness"
	"seckill/internal/testkit/testenv"
	"seckill/web"
)

// loadCourse reads the course the page and docs/COURSE.md are made from.
func loadCourse(t *testing.T) web.Course {
	t.Helper()
	c, err := web.LoadCourse()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCourseCoversEveryScenario: a reader who does every lesson runs every
// scenario and drill this command knows, every scenario a lesson names
// exists, and the verdicts each lesson promises for its command are those
// the scenario's steps (or the drill's variants) expect, row by row.
func TestCourseCoversEveryScenario(t *testing.T) {
	c := loadCourse(t)
	taught := make(map[string]string) // scenario → the lesson that runs it
	for _, l := range c.Lessons {
		for _, name := range l.Scenarios() {
			_, err := harness.LookupScenario(name)
			if err != nil && lookupDrill(name) == nil && name != "opening" {
				t.Errorf("lesson %s runs -scenario %s, which does not exist", l.ID, name)
			}
			taught[name] = l.ID
		}
		if name := l.Scenario(); name != "" {
			if want, ok := expectedVerdicts(name); ok && !slices.Equal(want, normalized(l.Verdicts)) {
				t.Errorf("lesson %s promises %v for -scenario %s; the scenario expects %v", l.ID, l.Verdicts, name, want)
			}
		}
	}
	for _, name := range strings.Split(scenarioNames(), ", ") {
		if taught[name] == "" {
			t.Errorf("-scenario %s is in no lesson of web/static/course.json", name)
		}
	}
}

// expectedVerdicts gives, row by row, the verdicts a scenario's steps or a
// drill's variants expect, each set sorted and joined by "|"; ok is false
// for a scenario whose rows are not known in advance (one per lock, or
// the opening's report).
func expectedVerdicts(name string) (rows []string, ok bool) {
	if d := lookupDrill(name); d != nil {
		for _, v := range d.Variants {
			rows = append(rows, v.Want)
		}
		return rows, true
	}
	sc, err := harness.LookupScenario(name)
	if err != nil {
		return nil, false
	}
	for _, s := range sc.Steps {
		if s.AllLocks || s.Expect == nil {
			return nil, false
		}
		rows = append(rows, strings.Join(sortedSet(s.Expect(s.Spec.Lock)), "|"))
	}
	return rows, true
}

func normalized(verdicts []string) []string {
	var out []string
	for _, v := range verdicts {
		out = append(out, strings.Join(sortedSet(strings.Split(v, "|")), "|"))
	}
	return out
}

func sortedSet(v []string) []string {
	s := slices.Clone(v)
	slices.Sort(s)
	return slices.Compact(s)
}

// TestCourseLessons runs each lesson's command, small, and checks the
// verdicts the lesson promises: the rows of a scenario each within its
// lesson's set, a drill's variants each as it wants. The lessons run with
// their test_args (fewer buyers and units), on the backends the env names
// or the embedded ones, about 25 s in all bare under -race. Left out, each
// saying why in its test_skip: pause (about 6 s, random for two locks:
// TestFaultScenarios), failover and ap-vs-cp (redis-server, etcd: their
// own tests), unlock-before-commit (MySQL), async-durability (minutes, on
// a redis-server it kills), crash-after-take (RabbitMQ) and opening
// (TestOpeningScenario). docs/COURSE.md says the same under each lesson.
func TestCourseLessons(t *testing.T) {
	c := loadCourse(t)
	for _, l := range c.Lessons {
		name := l.Scenario()
		if name == "" || l.TestSkip != "" {
			continue
		}
		t.Run(l.ID, func(t *testing.T) {
			start := time.Now()
			defer func() { t.Logf("%s took %s", l.Command, time.Since(start).Round(time.Millisecond)) }()
			if lookupDrill(name) != nil {
				var stdout, stderr bytes.Buffer
				args := append([]string{"loadtest", "-scenario", name}, l.TestArgs...)
				if err := run(t.Context(), args, os.Getenv, strings.NewReader(""), &stdout, &stderr); err != nil {
					t.Fatalf("%s: %v\n%s\n%s", l.Command, err, stdout.String(), stderr.String())
				}
				return
			}
			sc, err := harness.LookupScenario(name)
			if err != nil {
				t.Fatal(err)
			}
			product := testenv.ProductID(t)
			args := append([]string{"-scenario", name, "-product", strconv.FormatInt(product, 10)}, l.TestArgs...)
			rep, _, err := runCommand(t, backends(t, product, len(sc.Steps)), args...)
			if err != nil {
				t.Fatalf("%s %s: %v", l.Command, strings.Join(l.TestArgs, " "), err)
			}
			if len(rep.Rows) != len(l.Verdicts) {
				t.Fatalf("%d rows, want %d: %v", len(rep.Rows), len(l.Verdicts), verdicts(rep.Rows))
			}
			for i, r := range rep.Rows {
				if !slices.Contains(strings.Split(l.Verdicts[i], "|"), r.Verdict) || !r.Agree {
					t.Errorf("row %d (%s): %s, agree %v; the lesson promises %s", i+1, r.Label(), r.Verdict, r.Agree, l.Verdicts[i])
				}
			}
		})
	}
}
