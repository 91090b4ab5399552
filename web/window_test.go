package web_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestPageCountsDown: a product that opens in 5 s shows "opens in …" with
// the buy button disabled; the button enables itself at the opening, on the
// server's clock, without a reload, and a purchase then sells; a product
// whose sale ended shows "sale ended" with the button disabled.
func TestPageCountsDown(t *testing.T) {
	browser := findChromium(t)
	soon, ended := 5_000_000+rand.Int64N(1_000_000), 6_000_000+rand.Int64N(1_000_000)
	srv, _ := startService(t, soon, ended)
	ctx := newBrowser(t, browser)
	do(t, ctx, "start the browser", chromedp.Navigate(srv.URL+"/healthz"))

	// The sale opens an hour away while the page loads and its buyer signs
	// in, which can take seconds on a loaded machine; then it is started
	// again to open in 5 s, and the page, polling, counts down to that.
	now := time.Now().UTC()
	createWindowed(t, srv.URL, soon, fmt.Sprintf(`"starts_at":%q`, now.Add(time.Hour).Format(time.RFC3339)))
	createWindowed(t, srv.URL, ended, fmt.Sprintf(`"starts_at":%q,"ends_at":%q`,
		now.Add(-time.Hour).Format(time.RFC3339), now.Add(-time.Minute).Format(time.RFC3339)))

	do(t, ctx, "open the page", chromedp.Navigate(srv.URL+"/?product="+strconv.FormatInt(soon, 10)))
	signIn(t, ctx, "opener")
	waitFor[bool](t, ctx, "the hour's countdown",
		`document.querySelector("#buy").disabled && document.querySelector("#sale-window").textContent.startsWith("opens in")`)
	opens := time.Now().UTC().Add(5 * time.Second).Truncate(time.Millisecond)
	createWindowed(t, srv.URL, soon, fmt.Sprintf(`"reset":true,"starts_at":%q`, opens.Format(time.RFC3339Nano)))
	text := waitFor[string](t, ctx, "the countdown",
		`document.querySelector("#buy").disabled && /^opens in [0-9.]+ s$/.test(document.querySelector("#sale-window").textContent) && document.querySelector("#sale-window").textContent`)
	if time.Now().After(opens) {
		t.Fatalf("the countdown %q was seen only after the opening: the machine is too slow for this test", text)
	}
	if !regexp.MustCompile(`^opens in [0-5]\.[0-9] s$`).MatchString(text) {
		t.Errorf("countdown %q, want \"opens in 4.9 s\" or so", text)
	}
	// When the button is first seen enabled, by this machine's clock, which
	// the service shares: not before the opening, less the estimate's error
	// (half a loopback round trip).
	enabledAt := waitFor[float64](t, ctx, "the button enabled at the opening", `!document.querySelector("#buy").disabled && Date.now()`)
	if early := opens.Sub(time.UnixMilli(int64(enabledAt))); early > 100*time.Millisecond {
		t.Errorf("the button was enabled %s before the opening", early)
	}
	t.Logf("enabled %s after the opening", time.UnixMilli(int64(enabledAt)).Sub(opens))
	do(t, ctx, "buy at the opening", chromedp.Click(chromedp.ID("buy")))
	waitFor[string](t, ctx, "the order sold at the opening", `document.querySelector("#order-id")?.textContent`)

	do(t, ctx, "open the ended product", chromedp.Navigate(srv.URL+"/?product="+strconv.FormatInt(ended, 10)))
	waitFor[bool](t, ctx, "the ended sale",
		`document.querySelector("#sale-window").textContent === "sale ended" && document.querySelector("#buy").disabled`)
}

// createWindowed creates a product sold to the public with a window.
func createWindowed(t *testing.T, base string, id int64, window string) {
	t.Helper()
	body := fmt.Sprintf(`{"id":%d,"name":"e2e window","stock":10,"shards":1,%s}`, id, window)
	var p struct {
		ID          int64
		Code, Error string
	}
	if code := sendJSON(t, http.MethodPost, base+"/api/products", body, &p); code != http.StatusOK {
		t.Fatalf("creating product %d with %s: %d %s: %s", id, window, code, p.Code, p.Error)
	}
}
