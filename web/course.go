package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Course is the walk through the failure modes, in the order the seed
// articles tell them. static/course.json is its one source: the page's
// course mode fetches it, docs/COURSE.md is generated from it, and the
// loadtest package's tests check it against the scenarios and run it.
type Course struct {
	Title string `json:"title"`
	Intro string `json:"intro"`
	// Sources are the source articles, by the number of their file in
	// the project's notes ("000" … "004"): a reader has only the title and
	// the author to find one, so every lesson cites its source so.
	Sources map[string]Source `json:"sources"`
	Lessons []Lesson          `json:"lessons"`
}

// Source is one source article as our copy gives it.
type Source struct {
	Title string `json:"title"`
	// Author is the name the article gives its author, or "" when our
	// copy names none; Where then says what the article is.
	Author string `json:"author,omitempty"`
	Where  string `json:"where,omitempty"`
}

// Cite names the article for a reader: “title” by author, or “title”
// (where; no author named) when the copy names none. app.js's cite says
// the same.
func (s Source) Cite() string {
	if s.Author != "" {
		return "“" + s.Title + "” by " + s.Author
	}
	return "“" + s.Title + "” (" + s.Where + "; no author named)"
}

// Lesson is one failure: predicted, run, seen and explained.
type Lesson struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	// Seed is the source article the failure comes from, a key of the
	// course's Sources ("000" … "004"); readers see its Cite, never the key.
	Seed     string `json:"seed"`
	Question string `json:"question"`
	// Answer is what the question's prediction should be: "more",
	// "exactly" or "fewer" units sold than the stock. With a Preset it
	// is what the page's run of the preset shows; without, what Command does.
	// Empty when the lesson compares locks: Predictions then ask one each.
	Answer string `json:"answer,omitempty"`
	// Predictions, for a lesson that compares locks, ask one prediction
	// per lock instead of one for the lesson.
	Predictions []Prediction `json:"predictions,omitempty"`
	Failure     string       `json:"failure"`
	// Command is the one command of the lesson: go run ./loadtest -scenario
	// NAME, or go test -run PATTERN ./PACKAGE.
	Command string `json:"command"`
	// Verdicts are the verdicts a loadtest Command prints, one per row (a
	// scenario's step, a drill's variant), in order; "A|B" when the row may
	// reach either. A step that runs several times prints a row per run,
	// each reaching one of its verdicts. Empty for a go test command,
	// which passes or fails.
	Verdicts []string `json:"verdicts,omitempty"`
	// Across are what must hold across the runs of each step that runs
	// several times, as the scenario states it: "token: OVERSOLD in at
	// least 1 of 7 runs".
	Across []string `json:"across,omitempty"`
	// Look is what to look at: the verdict and the timeline's sentence.
	Look string `json:"look"`
	Why  string `json:"why"`
	// Fix is the fix, which the next lesson brings.
	Fix string `json:"fix"`
	// Test is the test that proves it: go test -run PATTERN ./PACKAGE.
	Test string `json:"test"`
	// Needs names the server the lesson's command needs beyond the
	// embedded stand-ins, or is empty.
	Needs string `json:"needs,omitempty"`
	// More are the other scenarios the lesson asks to run.
	More []string `json:"more,omitempty"`
	// Preset is the lab form the page's course mode fills in; nil when the
	// page's one-instance lab cannot show the failure.
	Preset *Preset `json:"preset,omitempty"`
	// TestArgs are the flags the loadtest package's course test adds to a
	// loadtest Command to run it small ([] to run it as it is); TestSkip
	// says why that test leaves the lesson out instead. A loadtest lesson
	// has exactly one of them.
	TestArgs []string `json:"test_args,omitempty"`
	TestSkip string   `json:"test_skip,omitempty"`
}

// Preset is a lab run's form, with the names of POST /api/runs.
type Preset struct {
	Lock          string `json:"lock"`
	Mode          string `json:"mode"`
	Shards        int    `json:"shards"`
	Stock         int    `json:"stock"`
	Buyers        int    `json:"buyers"`
	Concurrency   int    `json:"concurrency"`
	HoldMS        int    `json:"hold_ms"`
	Fault         string `json:"fault"`
	FaultRequests int    `json:"fault_requests,omitempty"`
}

// Prediction is one lock's prediction in a lesson that compares locks.
type Prediction struct {
	// Lock is the strategy's name, as the command's rows print it.
	Lock string `json:"lock"`
	// Answer is what the lock's run shows, "A|B" when its runs may show
	// either (a lock that never oversells but may refuse buyers:
	// "exactly|fewer"); a prediction holds when it is one of them.
	Answer string `json:"answer"`
}

// Answers are the predictions the course asks for.
var Answers = []string{"more", "exactly", "fewer"}

// courseVerdicts are the verdicts a lesson may promise: the harness's and
// the drills' (OK).
var courseVerdicts = []string{"SAFE", "OVERSOLD", "LOST", "UNDERSOLD", "ERRORS", "SKIPPED", "OK"}

var (
	scenarioCommand = regexp.MustCompile(`^go run \./loadtest -scenario ([a-z0-9-]+)$`)
	testCommand     = regexp.MustCompile(`^go test -run (\S+|'[^']+') \./([a-z0-9/]+)$`)
	lessonID        = regexp.MustCompile(`^[a-z0-9-]+$`)
	// seedKey is a source cited by its file's number, which names nothing
	// a reader can find.
	seedKey = regexp.MustCompile(`(?i)\bseeds?\s*\d{3}`)
)

// ErrCourse: static/course.json is not a valid course.
var ErrCourse = errors.New("web: invalid course")

// LoadCourse reads and checks static/course.json.
func LoadCourse() (Course, error) {
	b, err := static.ReadFile("static/course.json")
	if err != nil {
		return Course{}, fmt.Errorf("reading the course: %w", err)
	}
	var c Course
	if err := json.Unmarshal(b, &c); err != nil {
		return Course{}, fmt.Errorf("%w: %w", ErrCourse, err)
	}
	return c, c.check()
}

func (c Course) check() error {
	if c.Title == "" || c.Intro == "" || len(c.Lessons) == 0 {
		return fmt.Errorf("%w: a title, an intro and lessons are needed", ErrCourse)
	}
	var errs []error
	for key, src := range c.Sources {
		if strings.TrimSpace(src.Title) == "" || strings.TrimSpace(src.Author) == "" && strings.TrimSpace(src.Where) == "" {
			errs = append(errs, fmt.Errorf("source %s: a title, and an author or what the article is", key))
		}
	}
	if seedKey.MatchString(c.Intro) {
		errs = append(errs, fmt.Errorf("the intro says %q: name the article by its title and author", seedKey.FindString(c.Intro)))
	}
	seen := make(map[string]bool)
	for i, l := range c.Lessons {
		if _, ok := c.Sources[l.Seed]; !ok {
			errs = append(errs, fmt.Errorf("lesson %d (%s): seed %q is not one of the sources", i+1, l.ID, l.Seed))
		}
		if seen[l.ID] {
			errs = append(errs, fmt.Errorf("lesson %d: id %q twice", i+1, l.ID))
		}
		seen[l.ID] = true
		if err := l.check(); err != nil {
			errs = append(errs, fmt.Errorf("lesson %d (%s): %w", i+1, l.ID, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrCourse, err)
	}
	return nil
}

// whichQuestion is a sentence, or a clause joined to one, that asks which:
// units sold cannot answer it. A relative "which" ("the lock, which
// expires, …") is not one.
var whichQuestion = regexp.MustCompile(`(?i)(^|[.?!:;？]\s*|\b(and|or|but|so)\s+)which\b`)

func (l Lesson) check() error {
	var errs []error
	for name, v := range map[string]string{"title": l.Title, "question": l.Question, "failure": l.Failure,
		"look": l.Look, "why": l.Why, "fix": l.Fix} {
		if strings.TrimSpace(v) == "" {
			errs = append(errs, fmt.Errorf("%s is empty", name))
		}
		if m := seedKey.FindString(v); m != "" {
			errs = append(errs, fmt.Errorf("%s says %q: name the article by its title and author", name, m))
		}
	}
	// One question, answered in units sold (or one per lock): a lesson that
	// asked two took one prediction for both (issue 41, finding 3).
	if n := strings.Count(l.Question, "?") + strings.Count(l.Question, "？"); n != 1 {
		errs = append(errs, fmt.Errorf("question asks %d questions: ask one, which a prediction answers", n))
	}
	if whichQuestion.MatchString(l.Question) {
		errs = append(errs, errors.New("question asks which: a prediction answers in units sold (more, exactly, fewer), one per lock when it compares locks"))
	}
	if !lessonID.MatchString(l.ID) {
		errs = append(errs, fmt.Errorf("id %q: lower case letters, digits and dashes", l.ID))
	}
	errs = append(errs, l.checkAnswers())
	if _, _, ok := l.GoTest(); !ok && l.Scenario() == "" {
		errs = append(errs, fmt.Errorf("command %q is neither go run ./loadtest -scenario NAME nor go test -run PATTERN ./PACKAGE", l.Command))
	}
	if !testCommand.MatchString(l.Test) {
		errs = append(errs, fmt.Errorf("test %q is not go test -run PATTERN ./PACKAGE", l.Test))
	}
	for _, m := range l.More {
		if !scenarioCommand.MatchString(m) {
			errs = append(errs, fmt.Errorf("more: %q is not go run ./loadtest -scenario NAME", m))
		}
	}
	errs = append(errs, l.checkVerdicts())
	if p := l.Preset; p != nil {
		if p.Lock == "" || p.Mode == "" || p.Fault == "" || p.Shards < 1 || p.Stock < 1 || p.Buyers < 1 || p.Concurrency < 1 || p.HoldMS < 0 || p.FaultRequests < 0 {
			errs = append(errs, fmt.Errorf("preset %+v: a lock, a mode and a fault, and counts of at least 1", *p))
		}
	}
	return errors.Join(errs...)
}

func (l Lesson) checkAnswers() error {
	if len(l.Predictions) == 0 {
		if !slices.Contains(Answers, l.Answer) {
			return fmt.Errorf("answer %q is not one of %v", l.Answer, Answers)
		}
		return nil
	}
	if l.Answer != "" || l.Preset != nil {
		return errors.New("a lesson with a prediction per lock has no answer of its own, and no preset: the page's lab runs one lock")
	}
	seen := make(map[string]bool)
	for _, p := range l.Predictions {
		if p.Lock == "" || seen[p.Lock] {
			return fmt.Errorf("prediction for lock %q: each lock named, once", p.Lock)
		}
		seen[p.Lock] = true
		for _, a := range strings.Split(p.Answer, "|") {
			if !slices.Contains(Answers, a) {
				return fmt.Errorf("prediction for lock %s: answer %q is not one of %v", p.Lock, a, Answers)
			}
		}
	}
	return nil
}

func (l Lesson) checkVerdicts() error {
	if l.Scenario() == "" {
		if len(l.Verdicts) > 0 || len(l.Across) > 0 || l.TestArgs != nil || l.TestSkip != "" {
			return errors.New("a go test command passes or fails: no verdicts, across, test_args or test_skip")
		}
		return nil
	}
	if len(l.Verdicts) == 0 {
		return errors.New("a loadtest command needs its verdicts")
	}
	if (l.TestArgs == nil) == (l.TestSkip == "") {
		return errors.New("a loadtest lesson has either test_args (the course test runs it) or test_skip (why it does not)")
	}
	for _, v := range l.Verdicts {
		for _, one := range strings.Split(v, "|") {
			if !slices.Contains(courseVerdicts, one) {
				return fmt.Errorf("verdict %q is not one of %v", one, courseVerdicts)
			}
		}
	}
	return nil
}

// Scenario is the loadtest scenario Command runs, or "" for a go test command.
func (l Lesson) Scenario() string {
	return scenarioName(l.Command)
}

// Scenarios are the scenarios the lesson runs: Command's and More's.
func (l Lesson) Scenarios() []string {
	var names []string
	for _, c := range append([]string{l.Command}, l.More...) {
		if n := scenarioName(c); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// GoTest is the -run pattern (unquoted) and package directory of a go test
// Command; ok is false for a loadtest command.
func (l Lesson) GoTest() (pattern, pkg string, ok bool) {
	return ParseGoTest(l.Command)
}

// ParseGoTest splits go test -run PATTERN ./PACKAGE into the pattern,
// unquoted, and the package's directory.
func ParseGoTest(cmd string) (pattern, pkg string, ok bool) {
	m := testCommand.FindStringSubmatch(cmd)
	if m == nil {
		return "", "", false
	}
	return strings.Trim(m[1], "'"), m[2], true
}

func scenarioName(cmd string) string {
	if m := scenarioCommand.FindStringSubmatch(cmd); m != nil {
		return m[1]
	}
	return ""
}
