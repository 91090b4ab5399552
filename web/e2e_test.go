package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"seckill/internal/app"
	"seckill/internal/lab"
	"seckill/internal/testkit"
	"seckill/internal/testkit/testenv"
	"seckill/web"
)

const token = "e2e-admin-token"

// TestPage drives the page in a headless Chromium: a purchase shows its
// order id, the oversell scenario shows OVERSOLD and a race timeline with red
// overlaps and its lost update in a sentence, the token lock shows SAFE and
// a timeline without, the none run's timeline reopens from the comparison
// table, a page reloaded mid-run follows the run going, a 5,000-purchase
// timeline draws and zooms on a phone, the comparison charts hold the runs,
// a dozen runs keep every chart label
// and every verdict in sight at 390 px, a link to the lab's product names it
// as the lab's, a refused run shows no counts, and the console stays clean
// (Chromium's markup advice included) at desktop width and at 375 px.
func TestPage(t *testing.T) {
	pg := startPage(t)
	srv, l, product, labProduct, ctx := pg.srv, pg.lab, pg.product, pg.labProduct, pg.ctx

	do(t, ctx, "open the page",
		chromedp.EmulateViewport(1280, 900),
		// Still charts and bars: the screenshots show the data, not a frame of an animation.
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-reduced-motion", Value: "reduce"}},
			})
			return err
		}),
		chromedp.Navigate(srv.URL+"/?product="+strconv.FormatInt(product, 10)),
		chromedp.WaitReady(chromedp.CSS("#lab-lock option")),
		chromedp.WaitReady(chromedp.CSS("#lab-mode option")),
		// Enter, as after any typed secret: the page stays, the token with it.
		chromedp.SendKeys(chromedp.ID("token"), token+"\r"),
	)
	waitFor[string](t, ctx, "the product's stock", `document.querySelector("#stat-stock").textContent === "100" && "ok"`)
	if n := run[int](t, ctx, `document.querySelectorAll("#shards li").length`); n != 5 {
		t.Errorf("the page shows %d shard bars, want 5", n)
	}
	if unlabelled := run[int](t, ctx, `[...document.querySelectorAll("input, select")].filter(e => e.labels.length === 0).length`); unlabelled != 0 {
		t.Errorf("%d form controls have no label", unlabelled)
	}
	if got, want := watching(t, ctx), []string{fmt.Sprint(product, " · from the link"), "1 · demo", "9001 · lab runs"}; !slices.Equal(got, want) {
		t.Errorf("product choices %q, want %q: the linked product, the demo, the lab's (9001 until a run names it)", got, want)
	}

	// The product is not a lab product: it sells to a buyer signed in, not
	// to a user id, whose field is gone.
	do(t, ctx, "buy before signing in", chromedp.Click(chromedp.ID("buy")))
	if out := waitFor[string](t, ctx, "the refusal", `document.querySelector("#buy-result").textContent`); !strings.Contains(out, "Sign in first") {
		t.Errorf("buying without signing in: %q, want the page to ask for a sign-in", out)
	}
	if shown := run[bool](t, ctx, `!document.querySelector("#user-id-field").hidden`); shown {
		t.Error("the user id field shows on a product that is not a lab product")
	}
	// Sign up with a password (signed in at once), sign out, sign in again.
	do(t, ctx, "sign up as alice", chromedp.SetValue(chromedp.ID("buyer-name"), "alice"),
		chromedp.SetValue(chromedp.ID("buyer-password"), "plum tree at dusk 7"), chromedp.Click(chromedp.ID("signup")))
	waitFor[bool](t, ctx, "alice signed up and in", `document.querySelector("#signin-status").textContent.startsWith("Signed in as alice ")`)
	signedUp := run[string](t, ctx, `JSON.parse(localStorage.getItem("seckill.buyer")).token`)
	do(t, ctx, "sign out", chromedp.Click(chromedp.ID("signout")))
	waitFor[bool](t, ctx, "alice signed out", `document.querySelector("#signin-status").textContent === "Not signed in." && document.querySelector("#signout").hidden`)
	var ended struct{ Code string }
	if code := getJSONAs(t, srv.URL+"/api/sessions/current", signedUp, &ended); code != http.StatusUnauthorized {
		t.Errorf("the session signed out: GET /api/sessions/current %d, want 401", code)
	}
	do(t, ctx, "sign in as alice with her password", chromedp.SetValue(chromedp.ID("buyer-name"), "alice"),
		chromedp.SetValue(chromedp.ID("buyer-password"), "plum tree at dusk 7"), chromedp.Click(chromedp.ID("signin")))
	waitFor[bool](t, ctx, "alice signed in", `document.querySelector("#signin-status").textContent.startsWith("Signed in as alice ")`)

	// Buy once: the id on the page is the string the API sent, digit for digit.
	do(t, ctx, "buy", chromedp.Click(chromedp.ID("buy")))
	orderID := waitFor[string](t, ctx, "the order id", `document.querySelector("#order-id")?.textContent`)
	if !regexp.MustCompile(`^[0-9]{16,20}$`).MatchString(orderID) {
		t.Fatalf("order id on the page: %q, want the decimal id", orderID)
	}
	var o struct{ ID, Status string }
	buyer := run[string](t, ctx, `JSON.parse(localStorage.getItem("seckill.buyer")).token`)
	if code := getJSONAs(t, srv.URL+"/api/orders/"+orderID, buyer, &o); code != http.StatusOK || o.ID != orderID {
		t.Errorf("GET /api/orders/%s: %d %+v: the page's id is not the order's", orderID, code, o)
	}
	waitFor[string](t, ctx, "the sale in the stock", `document.querySelector("#stat-stock").textContent === "99" && "ok"`)

	// The order is unpaid, its payment window counting down; pay it.
	if status := run[string](t, ctx, `document.querySelector("#order-status").textContent`); status != "unpaid" {
		t.Errorf("the order's state: %q, want unpaid", status)
	}
	if cd := waitFor[string](t, ctx, "the countdown", `document.querySelector("#order-countdown")?.textContent`); !regexp.MustCompile(`^pay within [01]:[0-5][0-9]$`).MatchString(cd) {
		t.Errorf("countdown %q, want pay within m:ss under the minute's window", cd)
	}
	do(t, ctx, "pay", chromedp.Click(chromedp.ID("pay")))
	waitFor[bool](t, ctx, "the order paid", `document.querySelector("#order-status").textContent === "paid" && !document.querySelector("#pay")`)
	waitFor[bool](t, ctx, "the audit's paid count", `document.querySelector("#stat-paid").textContent === "1"`)
	if code := getJSONAs(t, srv.URL+"/api/orders/"+orderID, buyer, &o); code != http.StatusOK || o.Status != "paid" {
		t.Errorf("GET /api/orders/%s after Pay: %d %+v, want paid", orderID, code, o)
	}

	// Buy again as the same buyer, from the keyboard: refused, with the API's code.
	do(t, ctx, "buy again", chromedp.Focus(chromedp.ID("buy")), chromedp.KeyEvent("\r"))
	if code := waitFor[string](t, ctx, "the refusal", `document.querySelector("#buy-code")?.textContent`); code != "already_bought" {
		t.Errorf("second purchase: %q, want already_bought", code)
	}
	if earlier := run[string](t, ctx, `document.querySelector("#orders").textContent`); !strings.Contains(earlier, orderID) || !strings.Contains(earlier, "paid") {
		t.Errorf("the earlier orders: %q, want the paid order %s", earlier, orderID)
	}

	// Another buyer buys and cancels: the unit goes back.
	signIn(t, ctx, "bob")
	do(t, ctx, "buy as another buyer", chromedp.Click(chromedp.ID("buy")))
	waitFor[bool](t, ctx, "the second order", fmt.Sprintf(`document.querySelector("#order-id")?.textContent !== %q && !!document.querySelector("#cancel")`, orderID))
	waitFor[string](t, ctx, "the second sale in the stock", `document.querySelector("#stat-stock").textContent === "98" && "ok"`)
	do(t, ctx, "cancel", chromedp.Click(chromedp.ID("cancel")))
	waitFor[bool](t, ctx, "the order cancelled", `document.querySelector("#order-status").textContent.startsWith("cancelled by the buyer")`)
	waitFor[bool](t, ctx, "the unit back and the audit's counts",
		`document.querySelector("#stat-stock").textContent === "99" && document.querySelector("#stat-cancelled").textContent === "1" && document.querySelector("#stat-unpaid").textContent === "0"`)

	// Reset with the typed admin token, once "reset" is typed too (issue
	// 36): without the word, nothing is reset; with it, the stock is whole.
	do(t, ctx, "reset", chromedp.Click(chromedp.ID("reset")), chromedp.WaitVisible(chromedp.ID("reset-word")), chromedp.Click(chromedp.ID("reset-go")))
	waitFor[bool](t, ctx, "the reset refused without its word",
		`document.querySelector("#product-status").textContent.startsWith("Not reset") && document.querySelector("#stat-stock").textContent === "99"`)
	do(t, ctx, "confirm the reset", chromedp.SendKeys(chromedp.ID("reset-word"), "reset"), chromedp.Click(chromedp.ID("reset-go")))
	waitFor[string](t, ctx, "the reset stock",
		`document.querySelector("#stat-stock").textContent === "100" && document.querySelector("#stat-sold").textContent === "0" && "ok"`)

	// The oversell scenario, then the same with the token lock.
	for _, tc := range []struct {
		lock, want string
		race       *regexp.Regexp // the timeline's sentence
		red        bool           // overlapping bars drawn in red
	}{
		{"none", "OVERSOLD", noneRace, true},
		{"token", "SAFE", regexp.MustCompile(`^No two purchases were inside one shard's critical section at once`), false},
	} {
		fill := fmt.Sprintf(`(() => {
			const f = document.querySelector("#run-form").elements;
			const set = (name, v) => { f[name].value = v; f[name].dispatchEvent(new Event("change")); };
			set("lock", %q); set("mode", "rmw"); set("shards", "5"); set("stock", "50");
			set("buyers", "300"); set("concurrency", "64"); set("hold_ms", "2"); set("fault", "none");
			return true;
		})()`, tc.lock)
		run[bool](t, ctx, fill)
		if name := run[string](t, ctx, `document.querySelector("#explain-name").textContent`); name != tc.lock {
			t.Errorf("the explanation is of %q, want %q", name, tc.lock)
		}
		// The chosen mode is explained beside the lock, from GET /api/modes.
		waitFor[bool](t, ctx, "the rmw mode's explanation",
			`document.querySelector("#explain-mode-name").textContent === "rmw" && document.querySelector("#explain-mode-breaks").textContent.length > 0`)
		before := run[int](t, ctx, `window.seckill.runs.length`)
		do(t, ctx, "run "+tc.lock, chromedp.Click(chromedp.ID("run")))
		waitFor[bool](t, ctx, tc.lock+" run to finish", fmt.Sprintf(`window.seckill.runs.length > %d`, before))
		verdict := run[string](t, ctx, `document.querySelector("#run-result .badge").textContent`)
		if verdict != tc.want {
			t.Errorf("lock %s: the page shows %q, want %s; result: %s", tc.lock, verdict, tc.want,
				run[string](t, ctx, `document.querySelector("#run-result").innerText`))
		}
		checkTimeline(t, ctx, tc.lock, tc.race, tc.red)
	}
	// The run moved the page to the lab's product: the purchase shown was of
	// the product watched before, and would read as this one's.
	if stale := run[string](t, ctx, `document.querySelector("#buy-result").textContent`); stale != "" {
		t.Errorf("watching the lab's product, the buy box still shows %q", stale)
	}

	// The comparison charts hold both runs, read from Chart.js itself.
	type series struct {
		Labels   []string  `json:"labels"`
		Oversold []float64 `json:"oversold"`
		RPS      []float64 `json:"rps"`
	}
	s := run[series](t, ctx, `(() => {
		const c = window.seckill.charts;
		return {labels: c.throughput.data.labels, oversold: c.oversold.data.datasets[0].data, rps: c.throughput.data.datasets[0].data};
	})()`)
	if len(s.Labels) != 2 || len(s.Oversold) != 2 || len(s.RPS) != 2 {
		t.Fatalf("charts: %+v, want two runs", s)
	}
	if !strings.Contains(s.Labels[0], "none") || !strings.Contains(s.Labels[1], "token") {
		t.Errorf("chart labels %v, want the none run then the token run", s.Labels)
	}
	if s.Oversold[0] <= 0 || s.Oversold[1] != 0 || s.RPS[0] <= 0 || s.RPS[1] <= 0 {
		t.Errorf("chart data: oversold %v, throughput %v", s.Oversold, s.RPS)
	}
	if rows := run[int](t, ctx, `document.querySelectorAll("#runs-body tr").length`); rows != 2 {
		t.Errorf("the runs table has %d rows, want 2", rows)
	}

	// The product panel follows the lab's product: it shows the token run's end.
	waitFor[bool](t, ctx, "the lab product's final stock",
		`document.querySelector("#stat-sold").textContent === "50" && document.querySelector("#product-meta").textContent.includes("lock token")`)
	// The none run's race, reopened from the comparison table (its oldest row).
	do(t, ctx, "reopen the none run", chromedp.Click(chromedp.CSS("#runs-body tr:last-child .run-open")))
	checkTimeline(t, ctx, "none, reopened", noneRace, true)
	desktop := screenshot(t, ctx, "desktop")
	do(t, ctx, "narrow the page", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile))
	if over := run[int](t, ctx, `document.documentElement.scrollWidth - document.documentElement.clientWidth`); over > 0 {
		t.Errorf("at 390 px the page is %d px wider than the screen", over)
	}
	mobile := screenshot(t, ctx, "390")
	if out := os.Getenv("SCREENSHOT_OUT"); out != "" {
		ext := filepath.Ext(out)
		for path, b := range map[string][]byte{out: desktop, strings.TrimSuffix(out, ext) + "-390" + ext: mobile} {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Error(err)
			}
			t.Logf("screenshot: %s", path)
		}
	}

	// A page reloaded mid-run finds the run going and follows it to its
	// end: a run of its seat (sent by the test with the page's seat, as the
	// page's own would be), and a run without a seat (a script's, curl's).
	seat := run[string](t, ctx, `localStorage.getItem("seckill.seat")`)
	for _, whose := range []string{`"seat":"` + seat + `",`, ""} {
		var going struct{ ID string }
		slow := `{` + whose + `"lock":"token","mode":"rmw","shards":2,"stock":40,"buyers":60,"concurrency":2,"hold_ms":40,"fault":"none"}`
		if code := sendJSON(t, http.MethodPost, srv.URL+"/api/runs", slow, &going); code != http.StatusAccepted {
			t.Fatalf("POST /api/runs %s: %d", slow, code)
		}
		do(t, ctx, "reload mid-run", chromedp.Reload())
		waitFor[bool](t, ctx, "the page to follow the run going, "+slow, fmt.Sprintf(
			`window.seckill.running === %q && !document.querySelector("#run-progress").hidden && document.querySelector("#run").disabled`, going.ID))
		if done := getRun(t, srv.URL, going.ID); done.Status != "running" {
			t.Errorf("run %s was %s by the time the page followed it: the check proves nothing; slow it down", going.ID, done.Status)
		}
		waitFor[bool](t, ctx, "the followed run's end", fmt.Sprintf(`window.seckill.runs.some(r => r.id === %q)`, going.ID))
		checkTimeline(t, ctx, "the followed run", regexp.MustCompile(`^No two purchases`), false)
	}

	// Eleven more runs, as a class would make in an hour, the last with
	// 5,000 purchases. A reload shows them all: GET /api/runs feeds the charts.
	more := []string{`{"lock":"none","mode":"rmw","shards":5,"stock":5000,"buyers":5000,"concurrency":64,"hold_ms":0,"fault":"none"}`}
	for _, lm := range []string{"local rmw", "setnx-expire rmw", "lua-setnx rmw", "setnx-px rmw", "reentrant rmw",
		"watchdog rmw", "fenced rmw", "getset rmw", "none lua", "none db"} {
		lock, mode, _ := strings.Cut(lm, " ")
		more = append(more, fmt.Sprintf(`{"lock":%q,"mode":%q,"shards":2,"stock":10,"buyers":40,"concurrency":8,"hold_ms":0,"fault":"none"}`, lock, mode))
	}
	more = append(more[1:], more[0])
	labRuns(t, srv.URL, seat, more...)
	do(t, ctx, "reload", chromedp.Reload())
	waitFor[bool](t, ctx, "runs after a reload", `window.seckill.runs.length === 15`)

	for _, vp := range []struct {
		w, h  int64
		phone bool
	}{{390, 844, true}, {1280, 900, false}} {
		w := vp.w
		resize(t, ctx, w, vp.h, vp.phone)
		if over := run[int](t, ctx, `document.documentElement.scrollWidth - document.documentElement.clientWidth`); over > 0 {
			t.Errorf("at %d px the page is %d px wider than the screen", w, over)
		}
		for _, p := range run[[]string](t, ctx, verdictsHidden) {
			t.Errorf("at %d px: %s", w, p)
		}
		// Chart.js redraws a frame after the resize; until then its scales are the old width's.
		waitFor[bool](t, ctx, fmt.Sprintf("the charts at %d px", w),
			`Object.values(window.seckill.charts).every(c => {
				const box = c.canvas.parentNode.getBoundingClientRect();
				return Math.abs(c.width - box.width) < 1 && Math.abs(c.height - box.height) < 1;
			})`)
		for _, p := range run[[]string](t, ctx, chartLabelsHidden) {
			t.Errorf("at %d px: %s", w, p)
		}
		if vp.phone {
			checkBigTimeline(t, ctx)
		}
	}

	// A link to the lab's product names it as the lab's, once.
	do(t, ctx, "open the lab's product by its link", chromedp.Navigate(srv.URL+"/?product="+strconv.FormatInt(labProduct, 10)))
	waitFor[bool](t, ctx, "the runs, which name the lab's product", `window.seckill.runs.length === 15`)
	if got, want := watching(t, ctx), []string{fmt.Sprint(labProduct, " · lab runs"), "1 · demo"}; !slices.Equal(got, want) {
		t.Errorf("?product=%d: product choices %q, want %q", labProduct, got, want)
	}

	// A run the service refuses sends nothing: its verdict and the reason, no
	// table of zeros, no word of the audit. Redlock is refused without
	// REDIS_ADDRS, which testenv never sets.
	do(t, ctx, "wait for the lab's form", chromedp.WaitReady(chromedp.CSS("#lab-lock option")), chromedp.WaitReady(chromedp.CSS("#lab-mode option")))
	// The browser kept the token typed before the page was opened again.
	waitFor[bool](t, ctx, "the kept token", `document.querySelector("#token").value === `+strconv.Quote(token))
	run[bool](t, ctx, `(() => {
		const f = document.querySelector("#lab-lock");
		f.value = "redlock";
		f.dispatchEvent(new Event("change"));
		return true;
	})()`)
	do(t, ctx, "run redlock", chromedp.Click(chromedp.ID("run")))
	waitFor[bool](t, ctx, "the refused run", `/ failed\.$/.test(document.querySelector("#run-status").textContent)`)
	type refused struct {
		Verdict string `json:"verdict"`
		Error   bool   `json:"error"`
		Grid    bool   `json:"grid"`
		Audit   bool   `json:"audit"`
	}
	got := run[refused](t, ctx, `(() => {
		const r = document.querySelector("#run-result");
		return {verdict: r.querySelector(".badge").textContent, error: !!r.querySelector(".error-text"),
			grid: !!r.querySelector("#result-grid"), audit: /audit/.test(r.textContent)};
	})()`)
	if want := (refused{Verdict: "SKIPPED", Error: true}); got != want {
		t.Errorf("the refused run shows %+v, want %+v: %s", got, want, run[string](t, ctx, `document.querySelector("#run-result").innerText`))
	}

	// Stop the run machinery before reading the console: nothing more comes.
	l.Close()
	for _, p := range pg.console.problems() {
		t.Errorf("console: %s", p)
	}
}

// checkBigTimeline opens the 5,000-purchase run (the newest) on a phone:
// its timeline draws every bar within the screen's width, and zooms.
func checkBigTimeline(t *testing.T, ctx context.Context) {
	t.Helper()
	do(t, ctx, "open the 5,000-purchase run", chromedp.Click(chromedp.CSS("#runs-body tr:first-child .run-open")))
	checkTimeline(t, ctx, "5,000 purchases", noneRace, true)
	if n := run[int](t, ctx, `window.seckill.timeline.data.bars.length`); n < 5000 {
		t.Errorf("the 5,000-purchase run's timeline has %d bars", n)
	}
	if over := run[int](t, ctx, `Math.max(...[...document.querySelectorAll("#timeline canvas")].map(c => c.getBoundingClientRect().right)) - innerWidth`); over > 0 {
		t.Errorf("the timeline is %d px wider than the phone's screen", over)
	}
	before := run[string](t, ctx, `document.querySelector("#timeline .tl-range").textContent`)
	do(t, ctx, "zoom in", chromedp.Click(chromedp.CSS("#timeline .tl-controls button")))
	if after := run[string](t, ctx, `document.querySelector("#timeline .tl-range").textContent`); after == before {
		t.Errorf("zooming in left the window at %q", after)
	}
}

// noneRace is the sentence of a run that lost updates.
var noneRace = regexp.MustCompile(`^Buyers \d+ and \d+ both read \d+ from shard \d+ at [0-9.]+ (and [0-9.]+ )?ms and both wrote \d+$`)

// checkTimeline waits for the race timeline of the run just shown and
// checks its sentence and whether red (overlapping) bars were drawn.
func checkTimeline(t *testing.T, ctx context.Context, what string, sentence *regexp.Regexp, red bool) {
	t.Helper()
	type drawn struct {
		Sentence string `json:"sentence"`
		Red      int    `json:"red"`
		Bars     int    `json:"bars"`
		Run      string `json:"run"`
		Shown    string `json:"shown"`
		Counts   string `json:"counts"`
		Axis     string `json:"axis"`
		Boxes    string `json:"boxes"`
	}
	waitFor[bool](t, ctx, what+"'s timeline", `(() => {
		const tl = window.seckill.timeline;
		return !!tl && !!tl.data && !document.querySelector("#timeline-section").hidden &&
			document.querySelector("#timeline").dataset.red !== undefined &&
			document.querySelector("#timeline-run").textContent.startsWith(tl.run + " ");
	})()`)
	d := run[drawn](t, ctx, `(() => {
		const tl = document.querySelector("#timeline");
		return {sentence: tl.querySelector(".tl-sentence").textContent, red: Number(tl.dataset.red),
			bars: window.seckill.timeline.data.bars.length, run: window.seckill.timeline.run,
			shown: document.querySelector("#run-result .what").textContent,
			counts: tl.querySelector(".tl-counts").textContent, axis: tl.querySelector(".tl-detail").dataset.axis || "",
			boxes: tl.querySelector(".tl-detail").dataset.axisBoxes || ""};
	})()`)
	// A time axis: at least two times, in ms, rising.
	if times := strings.Split(d.Axis, " | "); len(times) < 2 || !strings.HasSuffix(times[0], " ms") || !axisRises(times) {
		t.Errorf("%s: the timeline's time axis reads %q, want two or more rising times in ms", what, d.Axis)
	}
	if !axisClear(d.Boxes) {
		t.Errorf("%s: the axis's times overlap (their boxes, px: %s; times %q)", what, d.Boxes, d.Axis)
	}
	if !sentence.MatchString(d.Sentence) {
		t.Errorf("%s: the timeline says %q, want it to match %s", what, d.Sentence, sentence)
	}
	if red && d.Red == 0 && d.Bars > 0 {
		// The view opens on the sentence's two bars, placed each on its own
		// trace's clock (clamped into its request's window): a lost update
		// found by the values written need not overlap in the times drawn
		// (seen under CI load: 3,902 of 5,000 bars overlapping, none in the
		// opening view). The whole run must show them red.
		d.Red = run[int](t, ctx, `(() => {
			const tl = document.querySelector("#timeline");
			tl.seckillTimeline.setView(0, Number.MAX_SAFE_INTEGER);
			return Number(tl.dataset.red);
		})()`)
	}
	if (d.Red > 0) != red || d.Bars == 0 {
		// The counts say whether answers came back without a trace (a bar
		// missing), which a lost update's story may need.
		t.Errorf("%s: %d of %d bars drawn red, want red bars %v (%s)", what, d.Red, d.Bars, red, d.Counts)
	}
	if !strings.HasPrefix(d.Shown, "Run "+d.Run+":") {
		t.Errorf("%s: the timeline is run %s's, the result shown is %q", what, d.Run, d.Shown)
	}
}

// verdictsHidden lists the runs table's verdicts a reader cannot see without
// scrolling the table sideways.
const verdictsHidden = `(() => {
	const wrap = document.querySelector("#runs-table-wrap").getBoundingClientRect();
	const col = [...document.querySelectorAll("#runs-table th")].findIndex(th => th.textContent === "Verdict");
	if (col < 0) return ["the runs table has no Verdict column"];
	return [...document.querySelectorAll("#runs-body tr")].flatMap(tr => {
		const b = tr.cells[col].querySelector(".badge").getBoundingClientRect();
		return b.left >= wrap.left && b.right <= Math.min(wrap.right, innerWidth) ? [] :
			["run " + tr.cells[0].textContent + ": its verdict spans x " + b.left + "–" + b.right + ", the table shows " + wrap.left + "–" + wrap.right];
	});
})()`

// chartLabelsHidden lists, per comparison chart, the run labels Chart.js
// leaves out or cannot fit: skipped ticks, lines closer than their height,
// a label wider than its axis.
const chartLabelsHidden = `(() => {
	const bad = [];
	for (const [name, c] of Object.entries(window.seckill.charts)) {
		const axis = c.scales[c.options.indexAxis === "y" ? "y" : "x"];
		const shown = axis.ticks.map(t => axis.getLabelForValue(t.value));
		if (JSON.stringify(shown) !== JSON.stringify(c.data.labels)) {
			bad.push(name + " shows " + shown.length + " of " + c.data.labels.length + " run labels: " + shown.join(", "));
			continue;
		}
		const font = Chart.helpers.toFont(axis.options.ticks.font);
		for (let i = 1; i < shown.length; i++) {
			const gap = Math.abs(axis.getPixelForTick(i) - axis.getPixelForTick(i - 1));
			if (gap < font.lineHeight) {
				bad.push(name + ": labels " + i + " and " + (i + 1) + " are " + gap + " px apart, lines are " + font.lineHeight + " px");
				break;
			}
		}
		if (axis.isHorizontal()) continue;
		c.ctx.save();
		c.ctx.font = font.string;
		const widest = Math.max(...c.data.labels.map(l => c.ctx.measureText(l).width));
		c.ctx.restore();
		if (widest > axis.width) bad.push(name + ": the widest label is " + widest + " px, its axis " + axis.width + " px");
	}
	return bad;
})()`

// watching returns the product selector's choices.
func watching(t *testing.T, ctx context.Context) []string {
	t.Helper()
	return run[[]string](t, ctx, `[...document.querySelector("#product-id").options].map(o => o.textContent)`)
}

// findChromium returns the browser to drive, or skips.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	// Looked up on PATH, not at a fixed place, so that a PATH without the
	// servers and the browser is the bare machine the test must skip on.
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testkit.Skip(t, testkit.NoChromium, "no Chromium on PATH: set CHROMIUM or install Debian's chromium package")
	return ""
}

// newBrowser starts a headless Chromium with the flags this machine's closed
// network needs, in a fresh profile.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	alloc, cancel := chromedp.NewExecAllocator(t.Context(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	t.Cleanup(cancel)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	ctx, cancel = context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// pageTest is a service with a product of the test's own and a lab
// product, and a browser watching its page's console.
type pageTest struct {
	srv                 *app.Server
	lab                 *lab.Lab
	product, labProduct int64 // product has 100 units in 5 shards
	ctx                 context.Context
	console             *pageConsole
}

// startPage starts a pageTest, or skips without Chromium.
func startPage(t *testing.T) pageTest {
	t.Helper()
	browser := findChromium(t)
	pg := pageTest{product: 7_000_000 + rand.Int64N(1_000_000), labProduct: 8_000_000 + rand.Int64N(1_000_000)}
	pg.srv, pg.lab = startService(t, pg.product, pg.labProduct)
	resetProduct(t, pg.srv.URL, pg.product)
	pg.ctx = newBrowser(t, browser)
	pg.console = watchConsole(t, pg.ctx)
	return pg
}

// resize sets the page's viewport, a phone's (touch, mobile) or not.
func resize(t *testing.T, ctx context.Context, w, h int64, phone bool) {
	t.Helper()
	var opts []chromedp.EmulateViewportOption
	if phone {
		opts = append(opts, chromedp.EmulateMobile)
	}
	do(t, ctx, fmt.Sprintf("%d px wide", w), chromedp.EmulateViewport(w, h, opts...))
}

// startService starts the service in-process with the page and the lab, on
// the embedded backends, or on REDIS_ADDR and a database of its own on
// MYSQL_DSN when they are set.
func startService(t *testing.T, product, labProduct int64) (*app.Server, *lab.Lab) {
	t.Helper()
	cfg := testenv.Config(t)
	cfg.RateLimit, cfg.DemoStock, cfg.AdminToken = 0, 0, token
	l := lab.New(lab.Options{ProductID: labProduct})
	srv := testenv.Start(t, cfg, app.Extras{Web: web.FS(), Runs: l})
	t.Cleanup(func() { testenv.DropProductKeys(t, srv.RedisAddr(), product, labProduct) })
	return srv, l
}

// resetProduct creates the product the page watches, so that the test never
// touches demo product 1.
func resetProduct(t *testing.T, base string, id int64) {
	t.Helper()
	body := fmt.Sprintf(`{"id":%d,"name":"e2e phone","stock":100,"shards":5,"lock":"token","mode":"rmw","pay_timeout_ms":60000}`, id)
	var p struct{ ID int64 }
	if code := sendJSON(t, http.MethodPost, base+"/api/products", body, &p); code != http.StatusOK {
		t.Fatalf("creating product %d: %d", id, code)
	}
}

// labRuns sends lab runs through the API, one after the other, each to its
// end, from seat: the page lists its own seat's runs.
func labRuns(t *testing.T, base, seat string, specs ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for _, spec := range specs {
		var r struct{ ID, Status, Error string }
		spec = `{"seat":"` + seat + `",` + strings.TrimPrefix(spec, "{")
		if code := sendJSON(t, http.MethodPost, base+"/api/runs", spec, &r); code != http.StatusAccepted {
			t.Fatalf("POST /api/runs %s: %d %+v", spec, code, r)
		}
		for r.Status == "running" || r.Status == "queued" {
			select {
			case <-ctx.Done():
				t.Fatalf("run %s of %s: still running: %v", r.ID, spec, ctx.Err())
			case <-poll.C:
			}
			getJSON(t, base+"/api/runs/"+r.ID, &r)
		}
		if r.Status != "done" {
			t.Fatalf("run %s of %s: %s: %s", r.ID, spec, r.Status, r.Error)
		}
	}
}

// getRun reads a lab run.
func getRun(t *testing.T, base, id string) struct{ Status string } {
	t.Helper()
	var r struct{ Status string }
	getJSON(t, base+"/api/runs/"+id, &r)
	return r
}

func getJSON(t *testing.T, url string, out any) int {
	t.Helper()
	return sendJSON(t, http.MethodGet, url, "", out)
}

// getJSONAs is getJSON for the buyer of bearer.
func getJSONAs(t *testing.T, url, bearer string, out any) int {
	t.Helper()
	return sendJSONAs(t, http.MethodGet, url, bearer, "", out)
}

// signIn signs a buyer in through the page's form.
func signIn(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	do(t, ctx, "sign in as "+name, chromedp.SetValue(chromedp.ID("buyer-name"), name), chromedp.Click(chromedp.ID("signin")))
	waitFor[bool](t, ctx, name+" signed in", fmt.Sprintf(`document.querySelector("#signin-status").textContent.startsWith("Signed in as %s ")`, name))
}

// sendJSON makes an admin request and decodes its JSON answer into out.
func sendJSON(t *testing.T, method, url, body string, out any) int {
	t.Helper()
	return sendJSONAs(t, method, url, token, body, out)
}

// sendJSONAs is sendJSON with bearer's token.
func sendJSONAs(t *testing.T, method, url, bearer, body string, out any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s %s: decoding %s: %v", method, url, b, err)
	}
	return resp.StatusCode
}

func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// run evaluates a JavaScript expression in the page.
func run[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitFor polls a JavaScript expression until it is truthy and returns it.
func waitFor[T any](t *testing.T, ctx context.Context, what, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Poll[T](expr, chromedp.WithPollingTimeout(90*time.Second)))
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	return v
}

// screenshot takes a full-page PNG into the test's temporary directory.
func screenshot(t *testing.T, ctx context.Context, name string) []byte {
	t.Helper()
	return keepShot(t, ctx, name, chromedp.FullScreenshot(100))
}

// keepShot takes a PNG with shot into the test's temporary directory.
func keepShot(t *testing.T, ctx context.Context, name string, shot chromedp.Action[[]byte]) []byte {
	t.Helper()
	b, err := chromedp.Run(ctx, shot)
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(t.TempDir(), "page-"+name+".png")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return b
}

// axisClear reports whether the axis's times, by their boxes
// ("left:right" in px, in order), each stand clear of the one before.
func axisClear(boxes string) bool {
	right := math.Inf(-1)
	for _, box := range strings.Fields(boxes) {
		var l, r float64
		if _, err := fmt.Sscanf(box, "%g:%g", &l, &r); err != nil || l < right {
			return false
		}
		right = r
	}
	return true
}

// axisRises reports whether the axis's times ("1.5 ms") rise.
func axisRises(times []string) bool {
	prev := -1.0
	for _, s := range times {
		v, err := strconv.ParseFloat(strings.ReplaceAll(strings.TrimSuffix(s, " ms"), ",", ""), 64)
		if err != nil || v <= prev {
			return false
		}
		prev = v
	}
	return true
}
