package lab

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"seckill/internal/api"
)

// Class keeps what each seat of a class predicted in each lesson and what
// its run showed, for the teacher's view: who answered, how many
// predictions held, which were made. It is in memory, like the lab's runs:
// a restart begins a new class. A seat's later answer to a lesson replaces
// its earlier one. Its methods are safe for concurrent use.
type Class struct {
	mu      sync.Mutex
	answers map[[2]string]api.ClassAnswer // by seat and lesson
}

// MaxClassAnswers bounds a Class: thirty students through every lesson
// twice over, and a stranger's flood cannot grow it further.
const MaxClassAnswers = 2000

// NewClass returns an empty class.
func NewClass() *Class { return &Class{answers: make(map[[2]string]api.ClassAnswer)} }

// Answer keeps a seat's answer to a lesson, checked, stamped with the time
// it came, and returns it. It fails with ErrInvalid, or ErrClassFull when
// the class holds MaxClassAnswers already.
func (c *Class) Answer(a api.ClassAnswer) (api.ClassAnswer, error) {
	spec, err := check(api.RunSpec{Seat: a.Seat, Student: a.Student})
	if err != nil {
		return a, err
	}
	a.Student = spec.Student
	if a.Seat == "" || a.Lesson == "" || len(a.Lesson) > api.MaxSeatLen {
		return a, fmt.Errorf("%w: seat and lesson are required (a lesson's id is up to %d characters)", ErrInvalid, api.MaxSeatLen)
	}
	if len(a.Predictions) == 0 || len(a.Predictions) > api.MaxClassPredictions {
		return a, fmt.Errorf("%w: predictions: one to %d, one per lock the lesson compares", ErrInvalid, api.MaxClassPredictions)
	}
	a.Held = true
	for _, p := range a.Predictions {
		if !slices.Contains(api.ClassGuesses, p.Predicted) || p.Outcome != "" && !slices.Contains(api.ClassGuesses, p.Outcome) || len(p.Lock) > api.MaxSeatLen {
			return a, fmt.Errorf("%w: a prediction and an outcome are each one of %v (the outcome empty while unknown)", ErrInvalid, api.ClassGuesses)
		}
		a.Held = a.Held && p.Held
	}
	a.At = time.Now().UTC()
	key := [2]string{a.Seat, a.Lesson}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.answers[key]; !ok && len(c.answers) >= MaxClassAnswers {
		return a, fmt.Errorf("%w: the class holds %d answers, as many as it keeps; a restart begins a new class", ErrClassFull, MaxClassAnswers)
	}
	c.answers[key] = a
	return a, nil
}

// Lessons returns the class's answers by lesson, in the order lessons were
// first answered: per lesson, how many seats answered and how many saw
// every prediction hold, how many made each prediction, and the answers,
// oldest first. Never nil.
func (c *Class) Lessons() []api.ClassLesson {
	c.mu.Lock()
	all := make([]api.ClassAnswer, 0, len(c.answers))
	for _, a := range c.answers {
		all = append(all, a)
	}
	c.mu.Unlock()
	slices.SortFunc(all, func(x, y api.ClassAnswer) int {
		return cmp.Or(x.At.Compare(y.At), cmp.Compare(x.Seat, y.Seat), cmp.Compare(x.Lesson, y.Lesson))
	})
	out := []api.ClassLesson{}
	at := map[string]int{}
	for _, a := range all {
		i, ok := at[a.Lesson]
		if !ok {
			i = len(out)
			at[a.Lesson] = i
			out = append(out, api.ClassLesson{Lesson: a.Lesson, Answers: []api.ClassAnswer{}, Predicted: []api.ClassCount{}})
		}
		l := &out[i]
		l.Answers = append(l.Answers, a)
		l.Seats++
		if a.Held {
			l.Held++
		}
		for _, p := range a.Predictions {
			j := slices.IndexFunc(l.Predicted, func(n api.ClassCount) bool { return n.Lock == p.Lock && n.Predicted == p.Predicted })
			if j < 0 {
				j = len(l.Predicted)
				l.Predicted = append(l.Predicted, api.ClassCount{Lock: p.Lock, Predicted: p.Predicted})
			}
			l.Predicted[j].Seats++
			if p.Held {
				l.Predicted[j].Held++
			}
		}
	}
	for i := range out {
		slices.SortFunc(out[i].Predicted, func(x, y api.ClassCount) int {
			return cmp.Or(cmp.Compare(x.Lock, y.Lock), cmp.Compare(slices.Index(api.ClassGuesses, x.Predicted), slices.Index(api.ClassGuesses, y.Predicted)))
		})
	}
	return out
}
