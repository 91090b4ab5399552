package lab

import (
	"errors"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"seckill/internal/api"
)

// TestClassCountsEachLessonsPredictions: the teacher's view says, per
// lesson, who answered, how many saw every prediction hold and how many
// made each prediction; a seat's second answer replaces its first.
func TestClassCountsEachLessonsPredictions(t *testing.T) {
	c := NewClass()
	answer := func(seat, lesson string, ps ...api.ClassPrediction) {
		t.Helper()
		if _, err := c.Answer(api.ClassAnswer{Seat: seat, Student: seat, Lesson: lesson, Predictions: ps}); err != nil {
			t.Fatal(err)
		}
	}
	more := api.ClassPrediction{Predicted: "more", Outcome: "more", Held: true}
	wrong := api.ClassPrediction{Predicted: "exactly", Outcome: "more"}
	answer("ana", "no-lock", wrong)
	answer("bo", "no-lock", more)
	answer("ana", "no-lock", more) // Ana tried again
	answer("ana", "pause",
		api.ClassPrediction{Lock: "token", Predicted: "more", Outcome: "more", Held: true},
		api.ClassPrediction{Lock: "fenced", Predicted: "more", Outcome: "exactly"})

	got := c.Lessons()
	want := []api.ClassLesson{
		{Lesson: "no-lock", Seats: 2, Held: 2, Predicted: []api.ClassCount{{Predicted: "more", Seats: 2, Held: 2}}},
		{Lesson: "pause", Seats: 1, Held: 0, Predicted: []api.ClassCount{
			{Lock: "fenced", Predicted: "more", Seats: 1}, {Lock: "token", Predicted: "more", Seats: 1, Held: 1}}},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(api.ClassLesson{}, "Answers")); diff != "" {
		t.Errorf("the class's lessons (-want +got):\n%s", diff)
	}
	if len(got) == 2 && (len(got[0].Answers) != 2 || got[0].Answers[0].Seat != "bo" || !got[0].Answers[1].Held) {
		t.Errorf("no-lock's answers: %+v, want Bo's then Ana's second, held", got[0].Answers)
	}
}

func TestClassRefusesWhatItCannotCount(t *testing.T) {
	c := NewClass()
	ok := api.ClassPrediction{Predicted: "more"}
	for name, a := range map[string]api.ClassAnswer{
		"no seat":            {Lesson: "l", Predictions: []api.ClassPrediction{ok}},
		"no lesson":          {Seat: "s", Predictions: []api.ClassPrediction{ok}},
		"no prediction":      {Seat: "s", Lesson: "l"},
		"a guess not listed": {Seat: "s", Lesson: "l", Predictions: []api.ClassPrediction{{Predicted: "lots"}}},
		"a seat with spaces": {Seat: "a b", Lesson: "l", Predictions: []api.ClassPrediction{ok}},
	} {
		if _, err := c.Answer(a); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	for i := range MaxClassAnswers {
		if _, err := c.Answer(api.ClassAnswer{Seat: "s", Lesson: strconv.Itoa(i), Predictions: []api.ClassPrediction{ok}}); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
	}
	if _, err := c.Answer(api.ClassAnswer{Seat: "t", Lesson: "l", Predictions: []api.ClassPrediction{ok}}); !errors.Is(err, ErrClassFull) {
		t.Errorf("an answer past MaxClassAnswers: %v, want ErrClassFull", err)
	}
	if _, err := c.Answer(api.ClassAnswer{Seat: "s", Lesson: "0", Predictions: []api.ClassPrediction{ok}}); err != nil {
		t.Errorf("a seat's new answer to a lesson it answered, on a full class: %v, want it kept", err)
	}
}
