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

	"seckill/internal/api"
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

// TestCourseQuestionsNameTheirRunsNumbers: a number a lesson's question
// names of buyers, units, shards, instances, runs or a duration is the
// run's: the page's preset when the lesson has one (the page asks the
// question and runs it), the command's scenario otherwise. Lesson 1 asked
// about a thousand buyers and a hundred units while the page ran 300 and 50.
func TestCourseQuestionsNameTheirRunsNumbers(t *testing.T) {
	for _, l := range loadCourse(t).Lessons {
		named := questionNumbers(l.Question)
		if len(named) == 0 {
			continue
		}
		runs, source := runNumbers(l)
		if runs == nil {
			t.Errorf("lesson %s: its question names %v, and neither a preset nor a scenario of the harness gives its run's numbers", l.ID, named)
			continue
		}
		for _, n := range named {
			if !slices.Contains(runs[n.unit], n.value) {
				t.Errorf("lesson %s: its question names %d %s; %s runs %s %v", l.ID, n.value, n.unit, source, n.unit, runs[n.unit])
			}
		}
	}
}

type namedNumber struct {
	value int
	unit  string
}

// numberWords are the numbers the questions spell out.
var numberWords = map[string]int{"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
	"eight": 8, "nine": 9, "ten": 10, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
	"a hundred": 100, "one hundred": 100, "two hundred": 200, "three hundred": 300, "a thousand": 1000}

// questionNumber is a number, in digits or words, and the unit it counts;
// a word may stand between them ("20,000 signed-in buyers").
var questionNumber = regexp.MustCompile(`(?i)\b(\d[\d,]*|(?:a|one|two|three) (?:hundred|thousand)|one|two|three|four|five|six|seven|eight|nine|ten|twenty|thirty|forty|fifty)\s+(?:[a-z-]+\s+)?(buyers|purchases|orders|units|shards?|instances|runs|ms|s)\b`)

// unitOf folds the words a question counts with into the run's fields.
var unitOf = map[string]string{"buyers": "buyers", "purchases": "buyers", "orders": "buyers", "units": "units",
	"shard": "shards", "shards": "shards", "instances": "instances", "runs": "runs", "ms": "ms", "s": "ms"}

func questionNumbers(q string) []namedNumber {
	var out []namedNumber
	for _, m := range questionNumber.FindAllStringSubmatch(q, -1) {
		word, unit := strings.ToLower(m[1]), strings.ToLower(m[2])
		v, ok := numberWords[word]
		if !ok {
			v, _ = strconv.Atoi(strings.ReplaceAll(word, ",", ""))
		}
		if unit == "s" {
			v *= 1000
		}
		out = append(out, namedNumber{v, unitOf[unit]})
	}
	return out
}

// runNumbers gives the numbers of the lesson's run by unit, and what the
// run is; nil when no preset or harness scenario describes it.
func runNumbers(l web.Lesson) (map[string][]int, string) {
	if p := l.Preset; p != nil {
		return map[string][]int{"buyers": {p.Buyers}, "units": {p.Stock}, "shards": {p.Shards},
			"ms": {p.HoldMS}, "instances": {1}, "runs": {1}}, "the page's preset"
	}
	if l.Scenario() == "opening" {
		return map[string][]int{"buyers": {openingBuyers}}, "-scenario opening"
	}
	sc, err := harness.LookupScenario(l.Scenario())
	if err != nil {
		return nil, ""
	}
	n := map[string][]int{"instances": {max(sc.Instances, 1)}, "ms": {millis(sc.LockTTL), millis(sc.LockWait)}}
	for _, s := range sc.Steps {
		sp := s.Spec
		n["buyers"] = append(n["buyers"], sp.Buyers)
		n["units"] = append(n["units"], sp.Stock)
		n["shards"] = append(n["shards"], sp.Shards)
		n["runs"] = append(n["runs"], max(s.Runs, 1))
		n["ms"] = append(n["ms"], millis(time.Duration(sp.Hold)), millis(time.Duration(sp.PayTimeout)))
		if s.Fault != nil {
			n["ms"] = append(n["ms"], millis(s.Fault.For))
		}
	}
	return n, "-scenario " + sc.Name
}

func millis(d time.Duration) int { return int(d / time.Millisecond) }

// TestCourseChecksCanFail feeds each lesson's check a wrong outcome and
// sees it refused. A step of the harness refuses, through the row's own
// check, a verdict outside its set; a step whose runs may reach every
// verdict (the pause, random run by run) must be checked across its runs,
// and runs that never reach what that check wants are refused. A drill's
// or the opening's rows, checked outside the harness, must each leave out
// a verdict a run can reach. A go test command passes or fails.
func TestCourseChecksCanFail(t *testing.T) {
	// What a step's run can reach: a sale against its stock, and LOST
	// (an order answered and never written) only where orders are queued.
	// A set missing only a verdict its run cannot reach refuses nothing.
	reachable := func(mode string) []string {
		v := []string{harness.Oversold, harness.Safe, harness.Undersold, harness.Errors}
		if mode == "async" || mode == "mq" {
			v = append(v, harness.Lost)
		}
		return v
	}
	outside := func(set, reachable []string) string {
		for _, v := range reachable {
			if !slices.Contains(set, v) {
				return v
			}
		}
		return ""
	}
	for _, l := range loadCourse(t).Lessons {
		if l.Scenario() == "" {
			continue
		}
		sc, err := harness.LookupScenario(l.Scenario())
		if err != nil {
			for i, row := range l.Verdicts {
				if outside(strings.Split(row, "|"), append(reachable("async"), api.VerdictOK)) == "" {
					t.Errorf("lesson %s: row %d accepts %s, every verdict a run reaches: it cannot fail", l.ID, i+1, row)
				}
			}
			continue
		}
		for i, s := range sc.Steps {
			if s.Expect == nil {
				continue
			}
			want := s.Expect(s.Spec.Lock)
			can := reachable(s.Spec.Mode)
			if wrong := outside(want, can); wrong != "" {
				row := harness.Row{RunResult: api.RunResult{Verdict: wrong, Agree: true}}
				if row.Check(want...) {
					t.Errorf("lesson %s: step %d (%s) accepts %s, which it does not expect", l.ID, i+1, s.Spec.Lock, wrong)
				}
				continue
			}
			if s.Across == nil {
				t.Errorf("lesson %s: step %d (%s) accepts every verdict and is not checked across its runs: it cannot fail", l.ID, i+1, s.Spec.Lock)
				continue
			}
			rows := make([]harness.Row, max(s.Runs, 1))
			for j := range rows {
				rows[j] = harness.Row{RunResult: api.RunResult{Verdict: outside(s.Across.Verdicts, can), Agree: true}}
			}
			if _, _, held, checked := s.Across.Check(rows); !checked || held {
				t.Errorf("lesson %s: step %d (%s): %d runs that never reach %v pass its check across the runs", l.ID, i+1, s.Spec.Lock, len(rows), s.Across.Verdicts)
			}
		}
	}
}

// TestCoursePredictionsAreTheLocksRuns: a lesson that asks one prediction
// per lock names locks its scenario runs, and each lock's answers are what
// its step may show, in the prediction's words: its check across the runs
// when it is random run by run (the worst run), else its verdicts.
func TestCoursePredictionsAreTheLocksRuns(t *testing.T) {
	words := map[string]string{harness.Oversold: "more", harness.Safe: "exactly", harness.Undersold: "fewer", harness.Errors: "fewer"}
	for _, l := range loadCourse(t).Lessons {
		if len(l.Predictions) == 0 {
			continue
		}
		sc, err := harness.LookupScenario(l.Scenario())
		if err != nil {
			t.Errorf("lesson %s asks a prediction per lock and runs no scenario of the harness (%q)", l.ID, l.Command)
			continue
		}
		for _, p := range l.Predictions {
			i := slices.IndexFunc(sc.Steps, func(s harness.Step) bool { return s.Spec.Lock == p.Lock })
			if i < 0 {
				t.Errorf("lesson %s: a prediction for lock %s, which -scenario %s does not run", l.ID, p.Lock, sc.Name)
				continue
			}
			s := sc.Steps[i]
			shows := s.Expect(p.Lock)
			if s.Across != nil {
				shows = s.Across.Verdicts
			}
			var want []string
			for _, v := range shows {
				want = append(want, words[v])
			}
			if got := sortedSet(strings.Split(p.Answer, "|")); !slices.Equal(got, sortedSet(want)) {
				t.Errorf("lesson %s: lock %s's answer is %s; its step shows %v: %s", l.ID, p.Lock, p.Answer, shows, strings.Join(sortedSet(want), "|"))
			}
		}
	}
}
