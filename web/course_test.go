package web_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"seckill/internal/testkit"
	"seckill/web"
)

var update = flag.Bool("update", false, "rewrite docs/COURSE.md from web/static/course.json")

const courseDoc = "../docs/COURSE.md"

// renderCourseDoc writes the course as markdown: docs/COURSE.md is this
// text, so that the document and the page's course mode are one source.
func renderCourseDoc(c web.Course) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n\n", c.Title)
	b.WriteString("<!-- Generated from web/static/course.json by go test ./web -run TestCourseDoc -update.\n" +
		"Edit the JSON, not this file. -->\n\n")
	fmt.Fprintf(&b, "%s\n\n", c.Intro)
	b.WriteString("The page has the same lessons: its **Course** panel sets the lab's form for each lesson that the\n" +
		"page's one instance can show, asks for your prediction, runs it and says whether the prediction held\n" +
		"(`go run ./cmd/seckill`, then open the page). `go test ./loadtest -run TestCourse` checks every lesson\n" +
		"against the scenarios, and runs small the ones no other test runs.\n\n" +
		"**A class.** The teacher starts `go run ./cmd/seckill -addr 0.0.0.0:8080`, whose serving line gives the URL\n" +
		"other machines open (with `-allowed-hosts` the machine's name, if students use a name), the operator\n" +
		"token, the teacher's, and the class token, which students type at the top of the page: it runs lessons\n" +
		"and sends their answers, and opens nothing else. Their runs share one lab: a run\n" +
		"started while another goes waits in a queue and says its place. Each browser sees its own runs, and\n" +
		"the whole class's on asking; each student's name goes with their runs and answers, and the panel's\n" +
		"**The class's predictions** counts, lesson by lesson, who predicted what and whose prediction held\n" +
		"(in the service's memory: a restart begins a new class).\n\n")
	for i, l := range c.Lessons {
		fmt.Fprintf(&b, "%d. [%s](#%d-%s)\n", i+1, l.Title, i+1, l.ID)
	}
	for i, l := range c.Lessons {
		fmt.Fprintf(&b, "\n## %d. %s\n\n", i+1, l.Title)
		fmt.Fprintf(&b, "<a id=\"%d-%s\"></a>From %s. **The question.** %s\n\n", i+1, l.ID, c.Sources[l.Seed].Cite(), l.Question)
		if len(l.Predictions) > 0 {
			var locks []string
			for _, p := range l.Predictions {
				locks = append(locks, p.Lock)
			}
			fmt.Fprintf(&b, "**Predict, for each lock** (%s): more units sold than the stock, exactly the stock, or fewer? (Answers under *Why*.)\n\n", strings.Join(locks, ", "))
		} else {
			fmt.Fprintf(&b, "**Predict:** more units sold than the stock, exactly the stock, or fewer? (Answer under *Why*.)\n\n")
		}
		fmt.Fprintf(&b, "**Run:**\n\n```sh\n%s\n```\n\n", l.Command)
		if l.Needs != "" {
			fmt.Fprintf(&b, "Needs %s; without it the command says so (SKIPPED).\n\n", l.Needs)
		}
		if p := l.Preset; p != nil {
			fault := p.Fault
			if p.FaultRequests > 0 {
				fault += fmt.Sprintf(" (first %d requests)", p.FaultRequests)
			}
			fmt.Fprintf(&b, "**On the page:** lock %s, mode %s, %d shard(s), stock %d, %d buyers, concurrency %d, hold %d ms, fault %s.\n\n",
				p.Lock, p.Mode, p.Shards, p.Stock, p.Buyers, p.Concurrency, p.HoldMS, fault)
		} else {
			b.WriteString("**On the page:** not here: the page's lab is one instance, and this failure needs the command's processes and servers.\n\n")
		}
		switch {
		case len(l.Across) > 0:
			fmt.Fprintf(&b, "**Verdicts**, one per step, which each of its runs reaches: %s.\n\n", verdictList(l.Verdicts))
			fmt.Fprintf(&b, "**Across the runs**, or the command fails: %s.\n\n", strings.Join(l.Across, "; "))
		case len(l.Verdicts) > 0:
			fmt.Fprintf(&b, "**Verdicts**, one per row: %s.\n\n", verdictList(l.Verdicts))
		}
		fmt.Fprintf(&b, "**What you will see.** %s\n\n", l.Look)
		fmt.Fprintf(&b, "**Why.** %s %s %s\n\n", answerSentence(l), l.Failure, l.Why)
		fmt.Fprintf(&b, "**The fix.** %s\n\n", l.Fix)
		fmt.Fprintf(&b, "**The test that proves it:** `%s`\n", l.Test)
		if len(l.More) > 0 {
			b.WriteString("\n**Also run:**\n\n```sh\n")
			for _, m := range l.More {
				b.WriteString(m + "\n")
			}
			b.WriteString("```\n")
		}
		if l.TestSkip != "" {
			fmt.Fprintf(&b, "\nThe course test does not run this lesson: %s.\n", l.TestSkip)
		}
	}
	return b.Bytes()
}

func verdictList(vs []string) string {
	var out []string
	for _, v := range vs {
		out = append(out, strings.ReplaceAll(v, "|", " or "))
	}
	return strings.Join(out, "; ")
}

// answerSentence gives the lesson's answer, or each lock's; a lesson
// checked across its runs is random run by run, and says so.
func answerSentence(l web.Lesson) string {
	random := ""
	if len(l.Across) > 0 {
		random = " in the worst of its runs (one run alone is random)"
	}
	if len(l.Predictions) == 0 {
		return fmt.Sprintf("The answer is *%s*%s.", answerText(l.Answer), random)
	}
	var each []string
	for _, p := range l.Predictions {
		var alt []string
		for _, a := range strings.Split(p.Answer, "|") {
			alt = append(alt, answerText(a))
		}
		each = append(each, fmt.Sprintf("%s *%s*", p.Lock, strings.Join(alt, " or ")))
	}
	if random != "" {
		random = ", each lock's worst run (one run alone is random)"
	}
	return fmt.Sprintf("The answers%s: %s.", random, strings.Join(each, "; "))
}

func answerText(a string) string {
	switch a {
	case "more":
		return "more than the stock"
	case "fewer":
		return "fewer than the stock"
	}
	return "exactly the stock"
}

// TestCourseDoc: docs/COURSE.md is what the course renders to, and every
// test a lesson names exists in the package it names.
func TestCourseDoc(t *testing.T) {
	c, err := web.LoadCourse()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range c.Lessons {
		for _, cmd := range []string{l.Command, l.Test} {
			pattern, pkg, ok := web.ParseGoTest(cmd)
			if !ok {
				continue
			}
			tests := testkit.TestFuncs(t, "../"+pkg)
			for _, alt := range strings.Split(pattern, "|") {
				name, _, _ := strings.Cut(strings.Trim(alt, "^$"), "/")
				if !tests[name] {
					t.Errorf("lesson %s: %q names %s, which is not a test of ./%s", l.ID, cmd, name, pkg)
				}
			}
		}
	}

	got := renderCourseDoc(c)
	if *update {
		if err := os.WriteFile(courseDoc, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(courseDoc)
	if err != nil {
		t.Fatalf("%v (run go test ./web -run TestCourseDoc -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("docs/COURSE.md is stale; run go test ./web -run TestCourseDoc -update (-file +course.json):\n%s", diff)
	}
}
