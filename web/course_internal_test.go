package web

import (
	"errors"
	"strings"
	"testing"
)

// LoadCourse refuses a course that the page, the document or the course
// test could not use, naming the lesson and what is wrong.
func TestCourseCheckRefuses(t *testing.T) {
	c, err := LoadCourse()
	if err != nil {
		t.Fatalf("the course as shipped: %v", err)
	}
	for _, tc := range []struct {
		name, want string
		mutate     func(*Lesson)
	}{
		{"an unknown answer", "answer", func(l *Lesson) { l.Answer = "some" }},
		{"a command of another shape", "neither", func(l *Lesson) { l.Command = "go run ./loadtest -lock none" }},
		{"a verdict nobody prints", "verdict", func(l *Lesson) { l.Verdicts = []string{"FINE"} }},
		{"no verdicts", "needs its verdicts", func(l *Lesson) { l.Verdicts = nil }},
		{"neither run nor skipped", "either test_args", func(l *Lesson) { l.TestArgs, l.TestSkip = nil, "" }},
		{"a preset without a lock", "preset", func(l *Lesson) {
			l.Preset = &Preset{Mode: "rmw", Fault: "none", Shards: 1, Stock: 1, Buyers: 1, Concurrency: 1}
		}},
		{"an unknown seed", "seed", func(l *Lesson) { l.Seed = "9" }},
		{"an answer beside a prediction per lock", "prediction per lock", func(l *Lesson) { l.Predictions = []Prediction{{"token", "more"}} }},
		{"a lock's prediction no reader can make", `answer "maybe"`, func(l *Lesson) {
			l.Answer, l.Preset, l.Predictions = "", nil, []Prediction{{"token", "more|maybe"}}
		}},
		{"a source cited by its number", "name the article by its title and author", func(l *Lesson) { l.Why = "As seed 002 tells it." }},
		{"no why", "why is empty", func(l *Lesson) { l.Why = " " }},
		{"two questions", "asks 2 questions", func(l *Lesson) { l.Question = "Can two clients hold a majority? On seven nodes?" }},
		{"a question units sold cannot answer", "which", func(l *Lesson) { l.Question = "Which one grants it twice?" }},
		{"a which in lower case", "which", func(l *Lesson) { l.Question = "Two locks run; and which one grants it twice?" }},
		{"a which after a clause", "which", func(l *Lesson) { l.Question = "Run it with two locks: which oversells?" }},
		{"a full-width question mark", "asks 2 questions", func(l *Lesson) { l.Question = "Can two clients hold a majority？ On seven nodes?" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := c
			bad.Lessons = append([]Lesson(nil), c.Lessons...)
			tc.mutate(&bad.Lessons[0])
			err := bad.check()
			if !errors.Is(err, ErrCourse) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), c.Lessons[0].ID) {
				t.Errorf("check: %v, want ErrCourse naming lesson %s and %q", err, c.Lessons[0].ID, tc.want)
			}
		})
	}
	// A source without its title names nothing a reader can find.
	untitled := c
	untitled.Sources = map[string]Source{}
	for k, v := range c.Sources {
		untitled.Sources[k] = v
	}
	untitled.Sources["002"] = Source{Author: "冰河"}
	if err := untitled.check(); !errors.Is(err, ErrCourse) || !strings.Contains(err.Error(), "source 002") {
		t.Errorf("a source without a title: %v, want refused", err)
	}
	dup := c
	dup.Lessons = append([]Lesson(nil), c.Lessons...)
	dup.Lessons[1].ID = dup.Lessons[0].ID
	if err := dup.check(); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("two lessons with one id: %v, want refused", err)
	}
}

// A relative "which" asks nothing: only a question that asks which is
// refused.
func TestWhichQuestion(t *testing.T) {
	for q, want := range map[string]bool{
		"Which one grants it twice?":                                    true,
		"Two locks run; which one grants it twice?":                     true,
		"Run it: and which oversells?":                                  true,
		"The lock, which expires after a second, sells how many units?": false,
		"Does the lock, which a pause outlives, oversell?":              false,
	} {
		if got := whichQuestion.MatchString(q); got != want {
			t.Errorf("whichQuestion(%q) = %v, want %v", q, got, want)
		}
	}
}
