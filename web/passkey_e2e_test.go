package web_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"

	"seckill/internal/app"
	"seckill/internal/testkit/testenv"
	"seckill/web"
)

// TestPagePasskey drives the page in a headless Chromium with a virtual
// authenticator (CTAP2, internal, resident keys, user verification): a
// buyer signs up with a password, adds a passkey, signs out, and signs in
// again with the passkey alone, as the same buyer. The page is opened at
// localhost, the service's default relying party (a passkey cannot be
// bound to an IP address).
func TestPagePasskey(t *testing.T) {
	browser := findChromium(t)
	srv := testenv.Start(t, testenv.Config(t), app.Extras{Web: web.FS()})
	base := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	ctx := newBrowser(t, browser)

	var authenticator webauthn.AuthenticatorID
	do(t, ctx, "open the page and add a virtual authenticator",
		chromedp.Navigate(base+"/"),
		chromedp.WaitReady(chromedp.ID("signin")),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			if _, err := cdp.Call(ctx, tg, webauthn.Enable, webauthn.EnableParams{}); err != nil {
				return err
			}
			res, err := cdp.Call(ctx, tg, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{
				Options: &webauthn.VirtualAuthenticatorOptions{
					Protocol: webauthn.AuthenticatorProtocolCtap2, Transport: webauthn.AuthenticatorTransportInternal,
					HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true,
				}})
			authenticator = res.AuthenticatorID
			return err
		}),
	)
	waitFor[bool](t, ctx, "the passkey sign-in offered", `!document.querySelector("#passkey-signin").hidden`)

	name := fmt.Sprintf("carol %d", rand.Int64N(1_000_000))
	do(t, ctx, "sign up", chromedp.SetValue(chromedp.ID("buyer-name"), name),
		chromedp.SetValue(chromedp.ID("buyer-password"), "plum tree at dusk 7"), chromedp.Click(chromedp.ID("signup")))
	waitFor[bool](t, ctx, "signed up and in", fmt.Sprintf(`document.querySelector("#signin-status").textContent.startsWith("Signed in as %s ")`, name))
	buyer := run[float64](t, ctx, `JSON.parse(localStorage.getItem("seckill.buyer")).buyer_id`)

	do(t, ctx, "add a passkey", chromedp.Click(chromedp.ID("passkey-add")))
	if got := waitFor[string](t, ctx, "the passkey added", `(s => !s.startsWith("Signed in") && s)(document.querySelector("#signin-status").textContent)`); !strings.HasPrefix(got, "Passkey added") {
		t.Fatalf("adding a passkey: %q", got)
	}
	do(t, ctx, "read the authenticator", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		res, err := cdp.Call(ctx, tg, webauthn.GetCredentials, webauthn.GetCredentialsParams{AuthenticatorID: authenticator})
		if err == nil && (len(res.Credentials) != 1 || !res.Credentials[0].IsResidentCredential || res.Credentials[0].RpID != "localhost") {
			t.Errorf("the authenticator holds %+v, want one discoverable credential for localhost", res.Credentials)
		}
		return err
	}))

	token := run[string](t, ctx, `JSON.parse(localStorage.getItem("seckill.buyer")).token`)
	do(t, ctx, "sign out", chromedp.Click(chromedp.ID("signout")))
	waitFor[bool](t, ctx, "signed out", `document.querySelector("#signin-status").textContent === "Not signed in."`)
	var ended struct{ Code string }
	if code := getJSONAs(t, srv.URL+"/api/sessions/current", token, &ended); code != http.StatusUnauthorized {
		t.Errorf("the password's session after signing out: %d, want 401", code)
	}

	do(t, ctx, "sign in with the passkey", chromedp.Click(chromedp.ID("passkey-signin")))
	waitFor[bool](t, ctx, "signed in with the passkey", fmt.Sprintf(`document.querySelector("#signin-status").textContent.startsWith("Signed in as %s ")`, name))
	if again := run[float64](t, ctx, `JSON.parse(localStorage.getItem("seckill.buyer")).buyer_id`); again != buyer {
		t.Errorf("the passkey signed in buyer %.0f, want %.0f", again, buyer)
	}
	var cur struct {
		BuyerID float64 `json:"buyer_id"`
	}
	token = run[string](t, ctx, `JSON.parse(localStorage.getItem("seckill.buyer")).token`)
	if code := getJSONAs(t, srv.URL+"/api/sessions/current", token, &cur); code != http.StatusOK || cur.BuyerID != buyer {
		t.Errorf("the passkey's session: %d %+v, want 200 buyer %.0f", code, cur, buyer)
	}
	screenshot(t, ctx, "passkey")
}
