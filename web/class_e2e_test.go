package web_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"seckill/internal/server"
	"seckill/web"
)

// TestPageClass: a class shares one lab (issue 41, finding 7). A run
// started from the page while a classmate's goes waits, saying its place;
// the runs table shows this browser's runs, and the whole class's on
// asking; a lesson's prediction reaches the teacher's view, counted, with
// the student's name.
func TestPageClass(t *testing.T) {
	browser := findChromium(t)
	course, err := web.LoadCourse()
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := startService(t, 7_000_000+rand.Int64N(1_000_000), 8_000_000+rand.Int64N(1_000_000))
	ctx := newBrowser(t, browser)
	do(t, ctx, "open the page as Ana",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitReady(chromedp.CSS("#lab-lock option")),
		chromedp.WaitReady(chromedp.CSS("#lesson-number")),
		// Ana holds the class token, not the operator's.
		chromedp.SendKeys(chromedp.ID("token"), server.ClassToken(token)),
		chromedp.SendKeys(chromedp.ID("lab-student"), "Ana"),
	)

	// Bo's run holds the lab: 60 purchases two at a time, each 40 ms inside the lock.
	var bo struct{ ID, Status string }
	slow := `{"seat":"bo-seat","student":"Bo","lock":"token","mode":"rmw","shards":2,"stock":40,"buyers":60,"concurrency":2,"hold_ms":40}`
	if code := sendJSON(t, http.MethodPost, srv.URL+"/api/runs", slow, &bo); code != http.StatusAccepted || bo.Status != "running" {
		t.Fatalf("Bo's run: %d %+v, want 202 running", code, bo)
	}
	do(t, ctx, "Ana's run", chromedp.Click(chromedp.ID("run")))
	said := waitFor[string](t, ctx, "Ana's run queued behind Bo's",
		`(() => { const s = document.querySelector("#run-status").textContent; return s.includes("place") && s; })()`)
	if !strings.Contains(said, "place 1 in the queue") {
		t.Errorf("Ana's queued run says %q, want its place, 1", said)
	}
	if done := getRun(t, srv.URL, bo.ID); done.Status != "running" {
		t.Errorf("Bo's run was %s when Ana's was seen queued: the check proves nothing; slow it down", done.Status)
	}
	waitFor[bool](t, ctx, "Ana's run done", `window.seckill.runs.length === 1`)
	rows := func() string {
		return run[string](t, ctx, `[...document.querySelectorAll("#runs-body tr")].map(tr => tr.cells[0].textContent).join(" | ")`)
	}
	if got := run[int](t, ctx, `document.querySelectorAll("#runs-body tr").length`); got != 1 {
		t.Errorf("Ana's runs table has %d rows (%s), want her one run", got, rows())
	}
	// Carl's run goes while Ana looks at the whole class's: she sees it
	// listed, and her lab is not taken over by following it.
	var carl struct{ ID, Status string }
	if code := sendJSON(t, http.MethodPost, srv.URL+"/api/runs", strings.ReplaceAll(slow, "bo-seat", "carl-seat"), &carl); code != http.StatusAccepted || carl.Status != "running" {
		t.Fatalf("Carl's run: %d %+v, want 202 running", code, carl)
	}
	do(t, ctx, "the whole class's runs", chromedp.Click(chromedp.ID("runs-class")))
	waitFor[bool](t, ctx, "both runs", `document.querySelectorAll("#runs-body tr").length === 2`)
	if got := rows(); !strings.Contains(got, "Ana") || !strings.Contains(got, "Bo") {
		t.Errorf("the whole class's runs name %q, want Ana's and Bo's", got)
	}
	if following := run[string](t, ctx, `String(window.seckill.running || "")`); following != "" {
		t.Errorf("Ana's page follows run %q (Carl's is %s), want none: another seat's run is not hers", following, carl.ID)
	}
	if now := getRun(t, srv.URL, carl.ID); now.Status != "running" {
		t.Errorf("Carl's run was %s when Ana's page was checked: the check proves nothing; slow it down", now.Status)
	}

	// A lesson answered without a run reaches the teacher's view.
	l := course.Lessons[4]
	do(t, ctx, "open "+l.ID, chromedp.Click(chromedp.CSS(`#course-list [data-lesson="`+l.ID+`"]`)))
	waitFor[bool](t, ctx, l.ID, fmt.Sprintf(`document.querySelector("#lesson").dataset.lesson === %q`, l.ID))
	do(t, ctx, "predict and reveal "+l.ID,
		chromedp.Click(chromedp.CSS(`input[name="prediction"][value="`+l.Answer+`"]`)),
		chromedp.Click(chromedp.ID("lesson-reveal")))
	waitFor[bool](t, ctx, "the outcome", `!document.querySelector("#lesson-outcome").hidden`)
	var lessons []struct {
		Lesson      string
		Seats, Held int
		Answers     []struct{ Student string }
	}
	for range 50 {
		if sendJSON(t, http.MethodGet, srv.URL+"/api/class/answers", "", &lessons); len(lessons) > 0 {
			break
		}
		run[bool](t, ctx, `new Promise(r => setTimeout(() => r(true), 100))`)
	}
	if len(lessons) != 1 || lessons[0].Lesson != l.ID || lessons[0].Seats != 1 || lessons[0].Held != 1 ||
		len(lessons[0].Answers) != 1 || lessons[0].Answers[0].Student != "Ana" {
		t.Errorf("the class's answers: %+v, want Ana's to %s, held", lessons, l.ID)
	}
	// Without the token the lesson still works, and says the class's view
	// did not get the answer.
	var next web.Lesson
	for _, c := range course.Lessons[5:] {
		if len(c.Predictions) == 0 { // one prediction, as l
			next = c
			break
		}
	}
	run[bool](t, ctx, `(document.querySelector("#token").value = "", true)`)
	do(t, ctx, "open "+next.ID,
		chromedp.Click(chromedp.CSS(`#course-list [data-lesson="`+next.ID+`"]`)))
	waitFor[bool](t, ctx, next.ID, fmt.Sprintf(`document.querySelector("#lesson").dataset.lesson === %q`, next.ID))
	do(t, ctx, "predict and reveal "+next.ID,
		chromedp.Click(chromedp.CSS(`input[name="prediction"][value="more"]`)),
		chromedp.Click(chromedp.ID("lesson-reveal")))
	said = waitFor[string](t, ctx, "the refused answer said",
		`(() => { const s = document.querySelector("#lesson-status").textContent; return s.includes("did not get") && s; })()`)
	if !strings.Contains(said, "class token") {
		t.Errorf("the lesson's status says %q, want why the class's view did not get the answer", said)
	}
	do(t, ctx, "the teacher types the operator token", chromedp.SendKeys(chromedp.ID("token"), token))
	do(t, ctx, "the teacher's view",
		chromedp.Click(chromedp.CSS("#class-answers-box summary")),
		chromedp.Click(chromedp.ID("class-answers-load")))
	got := waitFor[string](t, ctx, "the class's predictions table",
		`(() => { const b = document.querySelector("#class-answers-body"); return b.rows.length > 0 && b.textContent; })()`)
	if !strings.Contains(got, l.Title) || !strings.Contains(got, "Ana ✓") || !strings.Contains(got, l.Answer+" 1 (1)") {
		t.Errorf("the teacher's view says %q, want %q with Ana's %s, held", got, l.Title, l.Answer)
	}
}
