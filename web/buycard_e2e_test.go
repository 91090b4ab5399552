package web_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBuyCard drives the Buy card in a headless Chromium at 1280 and 390 px
// (issue 41, finding 1): a buyer signed in, with an unpaid order, sees
// every control of the card whole, none over another, and no "Sign in
// first" left from before; a buyer signed out sees neither the order nor
// the token kept, is asked to sign in again, and a Buy is refused in the
// page. With a few runs in the lab, the runs table at 390 px scrolls inside
// its box, not the page.
func TestBuyCard(t *testing.T) {
	pg := startPage(t)
	srv, product, ctx := pg.srv, pg.product, pg.ctx
	do(t, ctx, "open the page",
		chromedp.EmulateViewport(1280, 900),
		chromedp.Navigate(srv.URL+"/?product="+strconv.FormatInt(product, 10)),
		chromedp.WaitReady(chromedp.CSS("#lab-lock option")),
	)
	// The page lists its own seat's runs: these carry its seat.
	labRuns(t, srv.URL, run[string](t, ctx, `localStorage.getItem("seckill.seat")`),
		`{"lock":"none","mode":"rmw","shards":2,"stock":10,"buyers":40,"concurrency":8,"hold_ms":0,"fault":"none"}`,
		`{"lock":"token","mode":"rmw","shards":2,"stock":10,"buyers":40,"concurrency":8,"hold_ms":0,"fault":"none"}`)
	do(t, ctx, "reload", chromedp.Reload(), chromedp.WaitReady(chromedp.CSS("#lab-lock option")))
	waitFor[bool](t, ctx, "the product's stock", `document.querySelector("#stat-stock").textContent === "100"`)
	waitFor[bool](t, ctx, "the runs table", `document.querySelectorAll("#runs-body tr").length === 2`)
	do(t, ctx, "buy before signing in", chromedp.Click(chromedp.ID("buy")))
	waitFor[bool](t, ctx, "the sign-in warning", `document.querySelector("#buy-result").textContent.startsWith("Sign in first")`)
	// A name as long as the field takes: the status line that repeats it
	// must wrap, not push the buttons aside.
	name := "alice " + strings.Repeat("w", 30)
	signIn(t, ctx, name)
	// An order, unpaid, puts its Pay and Cancel in the card too.
	do(t, ctx, "buy", chromedp.Click(chromedp.ID("buy")))
	waitFor[bool](t, ctx, "the order and its sale in the stock",
		`!!document.querySelector("#order-id") && !!document.querySelector("#pay") && document.querySelector("#stat-stock").textContent === "99"`)

	for _, vp := range []struct {
		w, h  int64
		phone bool
	}{{1280, 900, false}, {390, 844, true}} {
		resize(t, ctx, vp.w, vp.h, vp.phone)
		for _, p := range run[[]string](t, ctx, buyCardFaults) {
			t.Errorf("at %d px, signed in: %s", vp.w, p)
		}
		if vp.phone {
			for _, p := range run[[]string](t, ctx, runsTableFaults) {
				t.Errorf("at %d px: %s", vp.w, p)
			}
		}
		keepShot(t, ctx, fmt.Sprintf("buy-%d", vp.w), chromedp.Screenshot(chromedp.CSS(`section[aria-labelledby="buy-h"]`)))
	}

	// Signed out, the page forgets the buyer's token and order, asks for a
	// sign-in and refuses a Buy itself: no order reaches the service.
	do(t, ctx, "sign out", chromedp.Click(chromedp.ID("signout")))
	waitFor[bool](t, ctx, "signed out", `document.querySelector("#signin-status").textContent === "Not signed in." &&
		document.querySelector("#signout").hidden && !document.querySelector("#signin").hidden &&
		localStorage.getItem("seckill.buyer") === null`)
	if left := run[string](t, ctx, `document.querySelector("#buy-result").textContent + document.querySelector("#orders").textContent`); left != "" {
		t.Errorf("signed out, the card still shows the buyer's order: %q", left)
	}
	do(t, ctx, "buy signed out", chromedp.Click(chromedp.ID("buy")))
	waitFor[bool](t, ctx, "the sign-in warning again", `document.querySelector("#buy-result").textContent.startsWith("Sign in first")`)
	if stock := run[string](t, ctx, `document.querySelector("#stat-stock").textContent`); stock != "99" {
		t.Errorf("a Buy signed out left the stock at %s, want 99", stock)
	}
	for _, p := range run[[]string](t, ctx, buyCardFaults) {
		t.Errorf("at 390 px, signed out: %s", p)
	}
	for _, p := range pg.console.problems() {
		t.Errorf("console: %s", p)
	}
}

// buyCardFaults lists what is wrong with the Buy card as drawn: two of its
// controls (inputs, buttons, status lines) overlapping, one narrower than
// a use needs or its text cut, one outside the card, and a warning that
// contradicts the sign-in shown.
const buyCardFaults = `(() => {
	const card = document.querySelector("#buy-h").closest(".card");
	const box = card.getBoundingClientRect();
	const name = e => "#" + (e.id || e.parentNode.id || e.tagName);
	const shown = [...card.querySelectorAll("input, select, button, #signin-status, #sale-window, #buy-result")]
		.filter(e => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden");
	const bad = [];
	const rects = shown.map(e => [e, e.getBoundingClientRect()]);
	for (const [e, r] of rects) {
		// A text field narrower than ten characters of its font hides what is typed.
		const min = e.matches("input, select") ? 10 * parseFloat(getComputedStyle(e).fontSize) : 44;
		if (r.width < min) bad.push(name(e) + " is " + r.width.toFixed(1) + " px wide, want at least " + min);
		if (e.matches("button") && e.scrollWidth > e.clientWidth + 1) bad.push(name(e) + "'s text is cut: " + e.scrollWidth + " px in " + e.clientWidth);
		if (r.left < box.left - 0.5 || r.right > box.right + 0.5) bad.push(name(e) + " spans x " + r.left + "–" + r.right + ", outside the card's " + box.left + "–" + box.right);
	}
	for (let i = 0; i < rects.length; i++) {
		for (let j = i + 1; j < rects.length; j++) {
			const [a, ra] = rects[i], [b, rb] = rects[j];
			if (a.contains(b) || b.contains(a)) continue; // the outcome box holds Pay and Cancel
			const w = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
			const h = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
			if (w > 0.5 && h > 0.5) bad.push(name(a) + " and " + name(b) + " overlap by " + w.toFixed(1) + "×" + h.toFixed(1) + " px");
		}
	}
	const signedIn = document.querySelector("#signin-status").textContent.startsWith("Signed in as ");
	const warning = document.querySelector("#buy-result").textContent.startsWith("Sign in first");
	if (signedIn && warning) bad.push("signed in, the card still says: " + document.querySelector("#buy-result").textContent);
	if (signedIn === document.querySelector("#signout").hidden) bad.push("Sign out is " + (signedIn ? "hidden" : "offered") + " to a buyer " + (signedIn ? "signed in" : "signed out"));
	return bad;
})()`

// runsTableFaults lists what keeps the runs table from being read: a page
// wider than the screen, a table box wider than the screen, a table wider
// than its box that its box does not scroll.
const runsTableFaults = `(() => {
	const bad = [];
	const over = document.documentElement.scrollWidth - document.documentElement.clientWidth;
	if (over > 0) bad.push("the page is " + over + " px wider than the screen");
	const wrap = document.querySelector("#runs-table-wrap");
	const r = wrap.getBoundingClientRect();
	if (r.left < 0 || r.right > innerWidth) bad.push("the runs table's box spans x " + r.left + "–" + r.right + " of " + innerWidth);
	if (wrap.scrollWidth > wrap.clientWidth && !["auto", "scroll"].includes(getComputedStyle(wrap).overflowX)) {
		bad.push("the runs table is " + wrap.scrollWidth + " px in a box of " + wrap.clientWidth + " that does not scroll");
	}
	return bad;
})()`
