package web_test

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"seckill/internal/app"
	"seckill/internal/lab"
	"seckill/internal/testkit/testenv"
	"seckill/web"
)

// TestPageCourse walks three lessons of the course in Chromium: each sets
// the lab's form from course.json, asks for a prediction, runs, shows the
// verdict and says whether the prediction held, and links the next. A
// prediction that did not hold says so; the progress survives a reload.
func TestPageCourse(t *testing.T) {
	browser := findChromium(t)
	course, err := web.LoadCourse()
	if err != nil {
		t.Fatal(err)
	}
	labProduct := 6_000_000 + rand.Int64N(1_000_000)
	cfg := testenv.Config(t)
	// The SETNX lesson's buyers each wait this long for the abandoned lock.
	cfg.RateLimit, cfg.DemoStock, cfg.AdminToken, cfg.LockWait = 0, 0, token, time.Second
	srv := testenv.Start(t, cfg, app.Extras{Web: web.FS(), Runs: lab.New(lab.Options{ProductID: labProduct})})
	t.Cleanup(func() { testenv.DropProductKeys(t, srv.RedisAddr(), labProduct) })

	ctx := newBrowser(t, browser)
	do(t, ctx, "open the page",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(srv.URL+"/?product="+strconv.FormatInt(labProduct, 10)),
		chromedp.WaitReady(chromedp.CSS("#lab-lock option")),
		chromedp.WaitReady(chromedp.CSS("#lesson-number")),
		chromedp.SendKeys(chromedp.ID("token"), token),
	)
	if got, want := run[int](t, ctx, `document.querySelectorAll("#course-list li").length`), len(course.Lessons); got != want {
		t.Fatalf("the page lists %d lessons, course.json has %d", got, want)
	}

	for i, tc := range []struct {
		id, predict, verdict string
		held                 bool
	}{
		{"no-lock", "more", "OVERSOLD", true},
		{"local-mutex", "more", "SAFE", false}, // one process: the mutex holds, the prediction does not
		{"setnx-crash", "fewer", "ERRORS", true},
	} {
		l := course.Lessons[i]
		if l.ID != tc.id || l.Preset == nil {
			t.Fatalf("lesson %d is %s (preset %v), want %s with a preset", i+1, l.ID, l.Preset != nil, tc.id)
		}
		waitFor[bool](t, ctx, "lesson "+tc.id, fmt.Sprintf(`document.querySelector("#lesson").dataset.lesson === %q`, tc.id))
		if q := run[string](t, ctx, `document.querySelector("#lesson-question").textContent`); q != l.Question {
			t.Errorf("%s: the question shown is %q, want course.json's", tc.id, q)
		}
		// Running before predicting is refused: the lesson asks first.
		do(t, ctx, "run "+tc.id+" without a prediction", chromedp.Click(chromedp.ID("lesson-run")))
		if s := run[string](t, ctx, `document.querySelector("#lesson-status").textContent`); !strings.Contains(s, "Predict first") {
			t.Errorf("%s: running without a prediction says %q, want it to ask for one", tc.id, s)
		}
		before := run[int](t, ctx, `window.seckill.runs.length`)
		do(t, ctx, "predict and run "+tc.id,
			chromedp.Click(chromedp.CSS(`input[name="prediction"][value="`+tc.predict+`"]`)),
			chromedp.Click(chromedp.ID("lesson-run")))
		waitFor[bool](t, ctx, tc.id+"'s run", fmt.Sprintf(`window.seckill.runs.length > %d && !document.querySelector("#lesson-outcome").hidden`, before))
		form := run[string](t, ctx, `(() => { const f = document.querySelector("#run-form").elements;
			return [f.lock.value, f.mode.value, f.shards.value, f.stock.value, f.buyers.value, f.fault.value].join(" "); })()`)
		p := l.Preset
		if want := fmt.Sprintf("%s %s %d %d %d %s", p.Lock, p.Mode, p.Shards, p.Stock, p.Buyers, p.Fault); form != want {
			t.Errorf("%s: the lab's form is %q, want the lesson's preset %q", tc.id, form, want)
		}
		verdict := run[string](t, ctx, `document.querySelector("#lesson-held .badge").textContent`)
		lab := run[string](t, ctx, `document.querySelector("#run-result .badge").textContent`)
		held := run[string](t, ctx, `document.querySelector("#lesson-verdict-held").textContent`)
		if verdict != tc.verdict || lab != tc.verdict {
			t.Errorf("%s: the lesson shows %q and the lab %q, want %s", tc.id, verdict, lab, tc.verdict)
		}
		if want := map[bool]string{true: "Your prediction held.", false: "Your prediction did not hold."}[tc.held]; held != want {
			t.Errorf("%s: predicted %s, the page says %q, want %q", tc.id, tc.predict, held, want)
		}
		if why := run[string](t, ctx, `document.querySelector("#lesson-why").textContent`); !strings.Contains(why, l.Why) {
			t.Errorf("%s: the why shown is %q", tc.id, why)
		}
		// The lesson quotes the race timeline's sentence of its run.
		race := run[string](t, ctx, `document.querySelector("#lesson-race").hidden ? "" : document.querySelector("#lesson-race-text").textContent`)
		if tc.id == "no-lock" {
			checkTimeline(t, ctx, tc.id, noneRace, true)
			if !noneRace.MatchString(race) {
				t.Errorf("%s: the lesson's race is %q, want the first lost update in a sentence", tc.id, race)
			}
		}
		if tc.id == "local-mutex" && !strings.HasPrefix(race, "No two purchases") {
			t.Errorf("%s: the lesson's race is %q, want no two purchases at once", tc.id, race)
		}
		if i == 1 {
			// The progress is the browser's: a reload finds both lessons done
			// and the second one open, with the prediction made.
			do(t, ctx, "reload", chromedp.Reload(), chromedp.WaitReady(chromedp.CSS("#lesson-number")))
			waitFor[bool](t, ctx, "the course after the reload", fmt.Sprintf(
				`document.querySelector("#course-progress").textContent === "2 of %d done" && document.querySelector("#lesson").dataset.lesson === "local-mutex" &&
				 document.querySelector('input[name="prediction"]:checked')?.value === "more" && !document.querySelector("#lesson-outcome").hidden`, len(course.Lessons)))
		}
		do(t, ctx, "next lesson", chromedp.Click(chromedp.ID("lesson-next")))
	}
	waitFor[bool](t, ctx, "the fourth lesson", fmt.Sprintf(`document.querySelector("#lesson").dataset.lesson === %q`, course.Lessons[3].ID))
	if done := run[int](t, ctx, `document.querySelectorAll("#course-list li.done").length`); done != 3 {
		t.Errorf("%d lessons marked done, want 3", done)
	}
	// A lesson the lab cannot show gives the command and, once predicted,
	// what it does.
	l := course.Lessons[4]
	do(t, ctx, "open "+l.ID, chromedp.Click(chromedp.CSS(`#course-list [data-lesson="`+l.ID+`"]`)))
	waitFor[bool](t, ctx, l.ID, fmt.Sprintf(`document.querySelector("#lesson").dataset.lesson === %q && document.querySelector("#lesson-run").hidden`, l.ID))
	do(t, ctx, "predict and reveal "+l.ID,
		chromedp.Click(chromedp.CSS(`input[name="prediction"][value="`+l.Answer+`"]`)),
		chromedp.Click(chromedp.ID("lesson-reveal")))
	if held := waitFor[string](t, ctx, "the answer", `!document.querySelector("#lesson-outcome").hidden && document.querySelector("#lesson-verdict-held").textContent`); held != "Your prediction held." {
		t.Errorf("%s: predicted its answer, the page says %q", l.ID, held)
	}
	if cmd := run[string](t, ctx, `document.querySelector("#lesson-command").textContent`); !regexp.MustCompile(`^go (run|test) `).MatchString(cmd) || cmd != l.Command {
		t.Errorf("%s: the command shown is %q, want %q", l.ID, cmd, l.Command)
	}
	screenshot(t, ctx, "course")
}

// TestPageCourseEveryLessonReachable: at a laptop's width and a phone's,
// every lesson's link is inside the list's visible box (a list capped in
// height hid lessons 9–17 at 1280 px, with nothing saying they were there);
// a lesson cites its article by title and author; a lesson that compares
// locks asks a prediction per lock and says which held, and a random
// lesson's answer says it is the worst of its runs.
func TestPageCourseEveryLessonReachable(t *testing.T) {
	browser := findChromium(t)
	course, err := web.LoadCourse()
	if err != nil {
		t.Fatal(err)
	}
	cfg := testenv.Config(t)
	cfg.RateLimit, cfg.DemoStock, cfg.AdminToken = 0, 0, token
	srv := testenv.Start(t, cfg, app.Extras{Web: web.FS(), Runs: lab.New(lab.Options{ProductID: 6_000_000 + rand.Int64N(1_000_000)})})
	ctx := newBrowser(t, browser)
	// Every link's box inside the list's box: what the list shows of itself
	// without scrolling in it.
	const hidden = `(() => { const list = document.querySelector("#course-list").getBoundingClientRect();
		return [...document.querySelectorAll("#course-list .lesson-link")].filter((a) => {
			const r = a.getBoundingClientRect(); return r.top < list.top || r.bottom > list.bottom + 1; }).length; })()`
	for _, vp := range [][2]int64{{1280, 800}, {375, 800}} {
		do(t, ctx, fmt.Sprintf("open the page at %dx%d", vp[0], vp[1]),
			chromedp.EmulateViewport(vp[0], vp[1]),
			chromedp.Navigate(srv.URL+"/"),
			chromedp.WaitReady(chromedp.CSS("#lesson-number")))
		waitFor[bool](t, ctx, "the lessons", fmt.Sprintf(`document.querySelectorAll("#course-list .lesson-link").length === %d`, len(course.Lessons)))
		if n := run[int](t, ctx, hidden); n != 0 {
			t.Errorf("at %d px: %d lessons hidden inside the list", vp[0], n)
		}
	}

	var pause web.Lesson
	for _, l := range course.Lessons {
		if l.ID == "pause" {
			pause = l
		}
	}
	if len(pause.Across) == 0 || len(pause.Predictions) < 2 {
		t.Fatal("the pause lesson is not checked across its runs, or asks no prediction per lock")
	}
	do(t, ctx, "open the pause lesson",
		chromedp.Click(chromedp.CSS(`#course-list [data-lesson="pause"]`)),
		chromedp.WaitVisible(chromedp.ID("lesson-reveal")))
	if seed, want := run[string](t, ctx, `document.querySelector("#lesson-seed").textContent`), course.Sources[pause.Seed].Cite(); !strings.Contains(seed, want) {
		t.Errorf("the pause lesson cites %q, want %q", seed, want)
	}
	if n := run[int](t, ctx, `document.querySelector("#lesson-predictions").hidden ? 0 : document.querySelectorAll("#lesson-predictions fieldset").length`); n != len(pause.Predictions) {
		t.Fatalf("the pause lesson shows %d predictions per lock, want %d", n, len(pause.Predictions))
	}
	// Every lock's prediction but the last: the lesson asks for the rest.
	last := len(pause.Predictions) - 1
	for _, p := range pause.Predictions[:last] {
		do(t, ctx, "predict "+p.Lock, chromedp.Click(chromedp.CSS(`input[name="prediction-`+p.Lock+`"][value="`+strings.Split(p.Answer, "|")[0]+`"]`)))
	}
	do(t, ctx, "reveal with a lock unpredicted", chromedp.Click(chromedp.ID("lesson-reveal")))
	if s := run[string](t, ctx, `document.querySelector("#lesson-status").textContent`); !strings.Contains(s, "Predict first") {
		t.Errorf("revealing with lock %s unpredicted says %q, want it to ask", pause.Predictions[last].Lock, s)
	}
	// The last lock predicted wrong: that one prediction did not hold.
	wrong := "more"
	if strings.Contains(pause.Predictions[last].Answer, "more") {
		wrong = "exactly"
	}
	do(t, ctx, "predict the last lock wrong and reveal",
		chromedp.Click(chromedp.CSS(`input[name="prediction-`+pause.Predictions[last].Lock+`"][value="`+wrong+`"]`)),
		chromedp.Click(chromedp.ID("lesson-reveal")))
	held := waitFor[string](t, ctx, "the answer", `!document.querySelector("#lesson-outcome").hidden && document.querySelector("#lesson-held").textContent`)
	if !strings.Contains(held, "did not hold") || !strings.Contains(held, "worst of its runs") || !strings.Contains(held, pause.Across[0]) {
		t.Errorf("the pause lesson's answer says %q, want its worst run, its check across the runs %q, and a prediction that did not hold", held, pause.Across[0])
	}
	for i, p := range pause.Predictions {
		want := p.Lock + " sells"
		if verdict := map[bool]string{true: " (held)", false: " (did not hold)"}[i < last]; !strings.Contains(held, verdict) {
			t.Errorf("the answer %q does not say %s%s", held, want, verdict)
		}
		if !strings.Contains(held, want) {
			t.Errorf("the answer %q does not say what %s", held, want)
		}
	}
}
