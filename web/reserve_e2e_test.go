package web_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestPageReserves: a product that sells only to buyers who reserved shows
// Reserve and the count before its opening, in the card at 390 and 1280 px;
// a signed-in buyer reserves and the count goes up; from the opening
// Reserve is disabled, a buyer who did not reserve is told not_reserved,
// and the one who did buys.
func TestPageReserves(t *testing.T) {
	browser := findChromium(t)
	id := 9_000_000 + rand.Int64N(1_000_000)
	srv, _ := startService(t, id, id+1)
	ctx := newBrowser(t, browser)
	do(t, ctx, "start the browser", chromedp.Navigate(srv.URL+"/healthz"))
	createWindowed(t, srv.URL, id, fmt.Sprintf(`"starts_at":%q,"reservation":true`, time.Now().UTC().Add(time.Hour).Format(time.RFC3339)))

	do(t, ctx, "open the page", chromedp.Navigate(srv.URL+"/?product="+strconv.FormatInt(id, 10)))
	signIn(t, ctx, "reserver")
	waitFor[bool](t, ctx, "Reserve offered, none reserved",
		`!document.querySelector("#reserve").hidden && !document.querySelector("#reserve").disabled &&
		 document.querySelector("#buy").disabled && document.querySelector("#reservations").textContent === "0 reserved"`)
	do(t, ctx, "reserve", chromedp.Click(chromedp.ID("reserve")))
	waitFor[bool](t, ctx, "the reservation, counted",
		`document.querySelector("#reserved") !== null && document.querySelector("#reservations").textContent === "1 reserved"`)
	for _, vp := range []struct {
		w, h  int64
		phone bool
	}{{390, 844, true}, {1280, 900, false}} {
		resize(t, ctx, vp.w, vp.h, vp.phone)
		if over := run[int](t, ctx, `document.documentElement.scrollWidth - document.documentElement.clientWidth`); over > 0 {
			t.Errorf("at %d px the page is %d px wider than the screen", vp.w, over)
		}
		if out := run[bool](t, ctx, `["#reserve", "#reservations", "#sale-window"].some(s => {
			const r = document.querySelector(s).getBoundingClientRect();
			return r.width === 0 || r.right > document.documentElement.clientWidth;
		})`); out {
			t.Errorf("at %d px Reserve, the count or the countdown is not shown whole", vp.w)
		}
	}
	screenshot(t, ctx, "reserve")

	// The sale is started again to open in 3 s: its reservations stay.
	opens := time.Now().UTC().Add(3 * time.Second).Truncate(time.Millisecond)
	createWindowed(t, srv.URL, id, fmt.Sprintf(`"reset":true,"starts_at":%q,"reservation":true`, opens.Format(time.RFC3339Nano)))
	do(t, ctx, "sign out", chromedp.Click(chromedp.ID("signout")))
	signIn(t, ctx, "walk-in")
	waitFor[bool](t, ctx, "the opening: Buy enabled, Reserve not",
		`!document.querySelector("#buy").disabled && document.querySelector("#reserve").disabled`)
	do(t, ctx, "buy without a reservation", chromedp.Click(chromedp.ID("buy")))
	waitFor[bool](t, ctx, "the refusal", `document.querySelector("#buy-code")?.textContent === "not_reserved"`)
	do(t, ctx, "reserve after the opening", chromedp.Click(chromedp.ID("reserve")), chromedp.Sleep(500*time.Millisecond))
	if !run[bool](t, ctx, `document.querySelector("#buy-code")?.textContent === "not_reserved"`) {
		t.Errorf("a disabled Reserve sent a reservation after the opening: the page no longer shows the purchase's refusal")
	}
	do(t, ctx, "sign out", chromedp.Click(chromedp.ID("signout")))
	signIn(t, ctx, "reserver")
	do(t, ctx, "buy with the reservation", chromedp.Click(chromedp.ID("buy")))
	waitFor[string](t, ctx, "the order", `document.querySelector("#order-id")?.textContent`)
}
