package main

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"seckill/internal/lab/experiment"
	"seckill/internal/lab/harness"
	"seckill/internal/reconcile"
	"seckill/internal/stock"
	"seckill/internal/testkit"
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

// TestCourseCoversEveryScenario: the verdicts each lesson promises for
// its command are those the scenario's steps (or the drill's variants)
// expect, row by row. That every lesson runs experiments of the table, and
// that a reader who does every lesson runs every one -scenario takes, is
// internal/lab/experiment's TestLessonsReachEveryExperiment.
func TestCourseCoversEveryScenario(t *testing.T) {
	c := loadCourse(t)
	tests := testkit.TestFuncs(t, ".")
	for _, l := range c.Lessons {
		// A lesson left out of TestCourseLessons because another test runs
		// its scenario names a test of this package.
		for _, name := range testName.FindAllString(l.TestSkip, -1) {
			if !tests[name] {
				t.Errorf("lesson %s: test_skip names %s, which is not a test of ./loadtest", l.ID, name)
			}
		}
		if name := l.Scenario(); name != "" {
			if _, ok := experiment.Lookup(name); !ok {
				t.Errorf("lesson %s runs -scenario %s, which is not in the experiments table", l.ID, name)
			}
			if want, ok := expectedVerdicts(name); ok && !slices.Equal(want, normalized(l.Verdicts)) {
				t.Errorf("lesson %s promises %v for -scenario %s; the scenario expects %v", l.ID, l.Verdicts, name, want)
			}
			if want := expectedAcross(name); !slices.Equal(want, l.Across) {
				t.Errorf("lesson %s promises %q across the runs of -scenario %s; the scenario checks %q", l.ID, l.Across, name, want)
			}
		}
	}
}

var testName = regexp.MustCompile(`\bTest[A-Z]\w*`)

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

// expectedAcross says, for each step of a scenario checked across its
// runs, what must hold: "token: OVERSOLD in at least 1 of 7 runs".
func expectedAcross(name string) []string {
	sc, err := harness.LookupScenario(name)
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range sc.Steps {
		if s.Across != nil {
			out = append(out, s.Spec.Lock+": "+s.Across.Describe(max(s.Runs, 1)))
		}
	}
	return out
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

// TestCourseLessons runs small each lesson's command that no other test
// runs, and checks the verdicts the lesson promises, each row within its
// lesson's set: crash, long-hold and lua-vs-lock, with their test_args,
// about 11 s bare under -race. The scenarios of oversell, cross-process,
// clock-jump, no-fallback and pay-vs-timeout are run by the tests their
// test_skip names, which check the same verdicts (and
// TestCourseCoversEveryScenario that the lesson promises what the scenario
// expects): running them twice would only slow CI. Left out for what they
// need: pause (21 runs, about 45 s: TestFaultScenarios),
// failover and ap-vs-cp (redis-server, etcd: their own tests),
// unlock-before-commit (MySQL), async-durability (minutes, on a
// redis-server it kills), crash-after-take (RabbitMQ) and opening
// (TestOpeningScenario). docs/COURSE.md says why under each lesson.
func TestCourseLessons(t *testing.T) {
	c := loadCourse(t)
	// One database for every lesson, each on products of its own: a
	// database per lesson (backends) costs more on MySQL than the lessons.
	env := map[string]string{"ADMIN_TOKEN": testenv.AdminToken, "REDIS_ADDR": os.Getenv("REDIS_ADDR")}
	if dsn := os.Getenv("MYSQL_DSN"); dsn != "" {
		env["MYSQL_DSN"] = testenv.Database(t, dsn)
	}
	getenv := func(k string) string { return env[k] }
	// Every lesson's products share one prefix, so that one SCAN of the
	// shared Redis finds their keys: a SCAN per product (deleteProductKeys)
	// costs seconds each on a Redis holding a million keys.
	prefix := testenv.ProductID(t)
	var used []int64
	if addr := env["REDIS_ADDR"]; addr != "" {
		t.Cleanup(func() { purgeLessonKeys(t, addr, prefix, used) })
	}
	for i, l := range c.Lessons {
		name := l.Scenario()
		if name == "" || l.TestSkip != "" {
			continue
		}
		t.Run(l.ID, func(t *testing.T) {
			start := time.Now()
			defer func() { t.Logf("%s took %s", l.Command, time.Since(start).Round(time.Millisecond)) }()
			if lookupDrill(name) != nil {
				t.Fatalf("-scenario %s is a drill, which prints no report to check: its own test runs it; give the lesson a test_skip naming it", name)
			}
			sc, err := harness.LookupScenario(name)
			if err != nil {
				t.Fatal(err)
			}
			product := prefix*lessonProducts + int64(i)*maxSteps
			for k := range len(sc.Steps) {
				used = append(used, product+int64(k))
			}
			args := append([]string{"-scenario", name, "-product", strconv.FormatInt(product, 10)}, l.TestArgs...)
			rep, _, err := runCommand(t, getenv, args...)
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

// A lesson's products are prefix*lessonProducts + lesson*maxSteps + step:
// every id is the prefix's digits and three more.
const (
	lessonProducts = 1000
	maxSteps       = 20
)

// purgeLessonKeys deletes from the shared Redis the keys of the products
// used, all under prefix (see lessonProducts): their exact keys, then one
// SCAN per pattern of stock.Purge, widened to every id of the prefix.
func purgeLessonKeys(t *testing.T, addr string, prefix int64, used []int64) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	var exact []string
	for _, id := range used {
		exact = append(exact, stock.MarkerKey(id))
		exact = append(exact, reconcile.ProductKeys(id)...)
	}
	if err := stock.Purge(context.Background(), rdb, nil, exact...); err != nil {
		t.Logf("cleaning up the lessons' products: %v", err)
	}
	p := strconv.FormatInt(prefix, 10)
	for _, pat := range []string{"seckill:*{" + p + "???_*}*", "seckill:buyer:{" + p + "???:*}*"} {
		iter := rdb.Scan(context.Background(), 0, pat, 1000).Iterator()
		var keys []string
		for iter.Next(context.Background()) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Logf("scanning %s: %v", pat, err)
			continue
		}
		t.Logf("deleting %d keys of %s", len(keys), pat)
		for len(keys) > 0 {
			n := min(len(keys), 500)
			if err := rdb.Unlink(context.Background(), keys[:n]...).Err(); err != nil {
				t.Logf("deleting the lessons' keys: %v", err)
				break
			}
			keys = keys[n:]
		}
	}
}
