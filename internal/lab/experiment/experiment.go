// Package experiment is the lab's one table of named experiments. A
// scenario (a harness preset run through the service's HTTP API), a drill
// (a fault below the API, driven on servers of its own), a bench (a
// measurement) and a lesson (a step of the course) are each a workload, a
// fault and the verdict expected: one row of All. The runners hold the
// code and look their rows up here: harness.Scenarios is built from the
// scenario rows, loadtest dispatches -scenario NAME through Lookup, and
// the lessons are read from the course (web/static/course.json), which
// names the experiments each lesson runs.
package experiment

import (
	"fmt"
	"strings"

	"seckill/web"
)

// Kind is what runs an experiment.
type Kind string

// The kinds of experiment.
const (
	// Scenario is a harness preset: runs of a workload through the
	// service, each with the verdicts it may reach (harness.Scenarios).
	Scenario Kind = "scenario"
	// Drill drives the locks and the stock directly, on servers it starts,
	// because its fault lies below the HTTP API; a row per variant.
	Drill Kind = "drill"
	// Bench measures: a report of numbers, judged against targets or not
	// at all, rather than a verdict per run.
	Bench Kind = "bench"
	// Lesson is a step of the course: a question, the experiment (or go
	// test) that answers it, and the verdicts it promises.
	Lesson Kind = "lesson"
)

// Kinds are the kinds, in the order -list prints them.
var Kinds = []Kind{Scenario, Drill, Bench, Lesson}

// Experiment is one row of the table.
type Experiment struct {
	// Name is what -scenario takes; scenarios, drills and benches share
	// one namespace. A lesson's is its id in the course, unique among
	// lessons (several are named after the scenario they run).
	Name string
	Kind Kind
	// Shows is what it shows, in one line.
	Shows string
	// Workload and Fault say what is run and what strikes it; "" for none.
	Workload, Fault string
	// Expect is the verdict expected: per step or variant for a scenario
	// or a drill ("lock VERDICT|VERDICT; …"), in words for a bench, the
	// promised verdicts (or that the test passes) for a lesson.
	Expect string
	// Summary is the long form a runner prints as it starts.
	Summary string
	// Command runs it, when that is not go run ./loadtest -scenario NAME
	// (a bench behind a flag of its own, a lesson's command).
	Command string
	// Runs are the experiments a lesson runs, by name: its command's and
	// the ones it asks to run next.
	Runs []string
}

// Run is the command that runs e.
func (e Experiment) Run() string {
	if e.Command != "" {
		return e.Command
	}
	return "go run ./loadtest -scenario " + e.Name
}

// All is the table: the scenarios, drills and benches, then the lessons
// in the course's order.
var All = append(runnable, lessons()...)

// Lookup returns the scenario, drill or bench named name (what -scenario
// takes); ok is false when there is none.
func Lookup(name string) (e Experiment, ok bool) {
	for _, e := range All {
		if e.Name == name && e.Kind != Lesson {
			return e, true
		}
	}
	return Experiment{}, false
}

// OfKind returns the rows of kind k, in the table's order.
func OfKind(k Kind) []Experiment {
	var out []Experiment
	for _, e := range All {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// Names returns the names of the rows of the kinds given, in order.
func Names(kinds ...Kind) []string {
	var names []string
	for _, k := range kinds {
		for _, e := range OfKind(k) {
			names = append(names, e.Name)
		}
	}
	return names
}

// lessons are the course's lessons as rows. The course is embedded and
// checked by web's tests; a course that does not load is a broken build,
// not a condition to run with.
func lessons() []Experiment {
	c, err := web.LoadCourse()
	if err != nil {
		panic(fmt.Sprintf("experiment: %v", err))
	}
	var out []Experiment
	for _, l := range c.Lessons {
		e := Experiment{Name: l.ID, Kind: Lesson, Shows: l.Title + " → " + l.Command, Summary: l.Question,
			Command: l.Command, Runs: l.Scenarios(), Expect: "the test passes"}
		if len(l.Verdicts) > 0 {
			e.Expect = strings.Join(l.Verdicts, ", ")
		}
		if p := l.Preset; p != nil {
			e.Workload = fmt.Sprintf("%s/%s, %d units, %d buyers", p.Lock, p.Mode, p.Stock, p.Buyers)
			e.Fault = p.Fault
		}
		out = append(out, e)
	}
	return out
}
