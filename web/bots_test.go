package web_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"

	"seckill/internal/app"
	"seckill/internal/testkit/testenv"
	"seckill/web"
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

// TestPageSignUpCaptcha: past its network's free accounts, a sign-up is
// answered captcha_required; the page shows a captcha, wrong digits are
// refused with another picture, and the right ones make the account and
// sign it in. A password shorter than GET /api/accounts/options says is
// refused on the page, before any request.
func TestPageSignUpCaptcha(t *testing.T) {
	browser := findChromium(t)
	cfg := testenv.Config(t)
	cfg.RateLimit, cfg.DemoStock, cfg.AdminToken = 0, 0, token
	cfg.SignupsCaptcha = 1
	srv := testenv.Start(t, cfg, app.Extras{Web: web.FS()})
	const password = "plum tree at dusk 7"
	// The network's one free account (it may be spent already on a
	// shared Redis: then this one is refused, and the page's needs the
	// captcha all the same).
	first := fmt.Sprintf(`{"name":"free-%d","password":%q}`, rand.Int64N(1e9), password)
	var made map[string]any
	if code := sendJSON(t, http.MethodPost, srv.URL+"/api/accounts", first, &made); code != http.StatusCreated && code != http.StatusForbidden {
		t.Fatalf("the network's free account: %d", code)
	}
	ctx := newBrowser(t, browser)
	name := fmt.Sprintf("carol-%d", rand.Int64N(1e9))
	do(t, ctx, "open the page", chromedp.Navigate(srv.URL+"/"))
	waitFor[bool](t, ctx, "the account rules", `window.seckill.accountOptions?.min_password > 0`)
	do(t, ctx, "sign up with a short password", chromedp.SetValue(chromedp.ID("buyer-name"), name),
		chromedp.SetValue(chromedp.ID("buyer-password"), "short"), chromedp.Click(chromedp.ID("signup")))
	waitFor[bool](t, ctx, "the page's refusal", `document.querySelector("#signin-status").textContent.includes("at least 15 characters")`)

	do(t, ctx, "sign up", chromedp.SetValue(chromedp.ID("buyer-password"), password), chromedp.Click(chromedp.ID("signup")))
	shown := waitFor[string](t, ctx, "the sign-up's captcha",
		`!document.querySelector("#signup-captcha-field").hidden && document.querySelector("#signup-captcha-img").complete &&
		 document.querySelector("#signup-captcha-img").naturalWidth > 0 && window.seckill.signupCaptcha`)
	do(t, ctx, "sign up with wrong digits", chromedp.SetValue(chromedp.ID("signup-captcha"), "abc"), chromedp.Click(chromedp.ID("signup")))
	waitFor[bool](t, ctx, "the refusal", `document.querySelector("#signin-status").textContent.startsWith("Sign-up refused")`)
	second := waitFor[string](t, ctx, "another picture", fmt.Sprintf(`window.seckill.signupCaptcha !== %q && window.seckill.signupCaptcha`, shown))
	digits := srv.Redis().HGet(t.Context(), "seckill:captcha:"+second, "answer").Val() // what a person reads off the picture
	if len(digits) != 6 {
		t.Fatalf("the captcha %s has solution %q", second, digits)
	}
	do(t, ctx, "sign up with the digits", chromedp.SetValue(chromedp.ID("signup-captcha"), digits), chromedp.Click(chromedp.ID("signup")))
	waitFor[bool](t, ctx, name+" signed up and in", fmt.Sprintf(`document.querySelector("#signin-status").textContent.startsWith("Signed in as %s ")`, name))
	if hidden := run[bool](t, ctx, `document.querySelector("#signup-captcha-field").hidden`); !hidden {
		t.Error("the sign-up's captcha still shows after the account was made")
	}
	screenshot(t, ctx, "signup-captcha")
}
