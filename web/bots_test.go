package web_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestPageCaptcha: on a product that guards its purchase path with a
// captcha, the page shows the picture; wrong digits are refused
// captcha_failed and a new picture comes; the right ones buy.
func TestPageCaptcha(t *testing.T) {
	browser := findChromium(t)
	id := 4_000_000 + rand.Int64N(1_000_000)
	srv, _ := startService(t, id, id+1)
	body := fmt.Sprintf(`{"id":%d,"name":"e2e captcha","stock":5,"shards":1,"path":true,"captcha":true}`, id)
	var p struct{ ID int64 }
	if code := sendJSON(t, http.MethodPost, srv.URL+"/api/products", body, &p); code != http.StatusOK {
		t.Fatalf("creating product %d: %d", id, code)
	}
	ctx := newBrowser(t, browser)
	do(t, ctx, "open the page", chromedp.Navigate(srv.URL+"/?product="+strconv.FormatInt(id, 10)))
	signIn(t, ctx, "captcha-solver")
	first := waitFor[string](t, ctx, "the captcha's picture",
		`!document.querySelector("#captcha-field").hidden && document.querySelector("#captcha-img").complete &&
		 document.querySelector("#captcha-img").naturalWidth > 0 && window.seckill.captcha`)
	do(t, ctx, "buy with wrong digits", chromedp.SetValue(chromedp.ID("captcha"), "abc"), chromedp.Click(chromedp.ID("buy")))
	waitFor[bool](t, ctx, "the refusal", `document.querySelector("#buy-code")?.textContent === "captcha_failed"`)
	second := waitFor[string](t, ctx, "another picture", fmt.Sprintf(`window.seckill.captcha !== %q && window.seckill.captcha`, first))
	digits := srv.Redis().HGet(t.Context(), "seckill:captcha:"+second, "answer").Val() // what a person reads off the picture
	if len(digits) != 6 {
		t.Fatalf("the captcha %s has solution %q", second, digits)
	}
	do(t, ctx, "buy with the digits", chromedp.SetValue(chromedp.ID("captcha"), digits), chromedp.Click(chromedp.ID("buy")))
	waitFor[string](t, ctx, "the order", `document.querySelector("#order-id")?.textContent`)
	screenshot(t, ctx, "captcha")
}
