package web_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"
)

// TestPagePollFailure answers the page's product poll 503 in the browser
// (issue 41, finding 8): one such answer, which the page's next poll
// recovers from, fails no test; polls that keep failing to the end do.
func TestPagePollFailure(t *testing.T) {
	pg := startPage(t)
	srv, product, ctx, console := pg.srv, pg.product, pg.ctx, pg.console

	// fail says how many of the polls to come are answered 503: -1 all.
	var fail atomic.Int64
	fail.Store(1)
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	do(t, ctx, "intercept the product's poll", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, fetch.Enable, fetch.EnableParams{
			Patterns: []*fetch.RequestPattern{{URLPattern: "*/api/products/" + strconv.FormatInt(product, 10)}},
		})
		return err
	}))
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			answer := chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				if n := fail.Load(); n < 0 || n > 0 && fail.CompareAndSwap(n, n-1) {
					_, err := cdp.Call(ctx, tg, fetch.FulfillRequest, fetch.FulfillRequestParams{
						RequestID: ev.RequestID, ResponseCode: 503,
						ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "application/json"}},
						Body:            []byte(`{"code":"timeout","error":"the request timed out"}`),
					})
					return err
				}
				_, err := cdp.Call(ctx, tg, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
				return err
			})
			if _, err := chromedp.Run(ctx, answer); err != nil {
				return // the browser is closing
			}
		}
	}()

	do(t, ctx, "open the page", chromedp.Navigate(srv.URL+"/?product="+strconv.FormatInt(product, 10)))
	waitFor[bool](t, ctx, "the page recovered from the failed poll",
		`document.querySelector("#stat-stock").textContent === "100" && document.querySelector("#product-status").textContent === ""`)
	if n := console.failedCalls(); n != 1 {
		t.Fatalf("the console logged %d failed calls, want the one 503: the check below proves nothing", n)
	}
	if p := console.problems(); len(p) != 0 {
		t.Errorf("one 503 the next poll recovered from: the test would fail on %q", p)
	}

	fail.Store(-1)
	waitFor[bool](t, ctx, "the page to show the failing polls", `document.querySelector("#product-status").textContent.startsWith("timeout:")`)
	p := console.problems()
	want := fmt.Sprintf("(GET %s/api/products/%d)", srv.URL, product)
	if len(p) == 0 || !strings.Contains(p[len(p)-1], "503") || !strings.HasSuffix(p[len(p)-1], want) {
		t.Errorf("polls failing to the end: the test would fail on %q, want the last a 503 %s", p, want)
	}
}
