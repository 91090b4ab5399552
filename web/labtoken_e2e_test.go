package web_test

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestTheLabSaysWhereTheTokenIs: a lab run refused for want of the
// operator token says, in one sentence and once, where the token is (the
// serving line), not the service's refusal and a hint that repeats it
// (issue 41, finding 2).
func TestTheLabSaysWhereTheTokenIs(t *testing.T) {
	browser := findChromium(t)
	srv, _ := startService(t, 7_000_000+rand.Int64N(1_000_000), 8_000_000+rand.Int64N(1_000_000))
	ctx := newBrowser(t, browser)
	do(t, ctx, "open the page without the token",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitReady(chromedp.CSS("#lab-lock option")),
		chromedp.Click(chromedp.ID("run")),
	)
	said := waitFor[string](t, ctx, "the refused run's status",
		`(() => { const s = document.querySelector("#run-status"); return s.classList.contains("error") && s.textContent; })()`)
	if !strings.Contains(said, "seckill serving") || !strings.Contains(said, "operator token") {
		t.Errorf("the lab's refusal %q does not say where the token is", said)
	}
	if strings.Count(said, "token") > 2 || strings.Contains(said, "unauthorized") || strings.Contains(said, "Bearer") || strings.Count(said, ".") > 1 {
		t.Errorf("the lab's refusal %q is more than one sentence, or repeats the service's", said)
	}
	if lines := run[int](t, ctx, `(() => { const s = document.querySelector("#run-status");
		return Math.round(s.getBoundingClientRect().height / parseFloat(getComputedStyle(s).lineHeight)); })()`); lines > 1 {
		t.Errorf("the lab's refusal %q takes %s lines, want one", said, strconv.Itoa(lines))
	}
}
