package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"seckill/internal/admission"
	"seckill/internal/api"
	"seckill/internal/server"
)

// The per-address limit counts the connection's peer, and believes
// X-Forwarded-For only from a trusted proxy: a client cannot walk past it
// by naming itself another address.
func TestPerAddressBelievesOnlyTrustedProxies(t *testing.T) {
	for _, c := range []struct {
		name    string
		trusted []string
		// second is the status of a second captcha asked for from another
		// forwarded address: counted apart only behind a trusted proxy.
		second int
	}{
		{"no proxy trusted", nil, http.StatusTooManyRequests},
		{"the loopback proxy trusted", []string{"127.0.0.1/32"}, http.StatusCreated},
	} {
		t.Run(c.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
			e := serve(t, server.Deps{
				Captchas: admission.NewCaptchas(rdb, admission.CaptchaOptions{}), PerAddress: admission.NewPerAddress(rdb, 1, time.Hour),
				TrustedProxies: c.trusted,
			})
			ask := func(forwarded string) (int, api.Error) {
				req, err := http.NewRequest(http.MethodPost, e.url+"/api/captcha", strings.NewReader(`{"for":"account"}`))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", api.MediaType)
				req.Header.Set("X-Forwarded-For", forwarded)
				var ae api.Error
				return e.send(req, &ae), ae
			}
			if st, ae := ask("203.0.113.1"); st != http.StatusCreated {
				t.Fatalf("first captcha: %d %+v", st, ae)
			}
			if st, ae := ask("203.0.113.1"); st != http.StatusTooManyRequests || ae.Code != api.CodeRateLimited {
				t.Fatalf("second captcha from the same address: %d %+v, want 429 rate_limited", st, ae)
			}
			if st, ae := ask("203.0.113.2"); st != c.second {
				t.Fatalf("a captcha forwarded for another address: %d %+v, want %d", st, ae, c.second)
			}
		})
	}
}

// A captcha is a PNG at the address its answer gives, until it is tried.
func TestCaptchaImage(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	caps := admission.NewCaptchas(rdb, admission.CaptchaOptions{})
	e := serve(t, server.Deps{Captchas: caps})
	var c api.Captcha
	if st := e.do("POST", "/api/captcha", api.CaptchaRequest{For: api.CaptchaForAccount}, &c); st != http.StatusCreated || c.ID == "" {
		t.Fatalf("new captcha: %d %+v", st, c)
	}
	resp, err := e.client.Get(e.url + c.Image)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/png" {
		t.Fatalf("image: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if err := caps.Solve(t.Context(), c.ID, "000000", admission.AccountBinding("127.0.0.0/24")); err == nil {
		t.Log("guessed the captcha; it is tried all the same")
	}
	var ae api.Error
	if st := e.do("GET", c.Image, nil, &ae); st != http.StatusNotFound || ae.Code != api.CodeNotFound {
		t.Fatalf("the image of a tried captcha: %d %+v, want 404 not_found", st, ae)
	}
	if st := e.do("GET", "/api/captcha/nope", nil, &ae); st != http.StatusNotFound {
		t.Fatalf("an unknown captcha: %d, want 404", st)
	}
}

// A bot without a path token, or with a used one, is refused; a signed-in
// buyer gets a token from the opening, through a captcha when the product
// asks for one, and buys with it once.
func TestPathAndCaptchaOverHTTP(t *testing.T) {
	e := startDefault(t)
	id := e.reset(product{"stock": 5, "lab": false, "path": true, "captcha": true})
	alice, bob := e.as("alice-"+t.Name()), e.as("bob-"+t.Name())
	pathURL := fmt.Sprintf("/api/products/%d/path", id)
	var ae api.Error
	if st := e.do("POST", pathURL, nil, &ae); st != http.StatusUnauthorized || ae.Code != api.CodeSignInRequired {
		t.Fatalf("a path for nobody: %d %+v, want 401 sign_in_required", st, ae)
	}
	if st := alice.do("POST", "/api/orders", map[string]any{"product_id": id}, &ae); st != http.StatusForbidden || ae.Code != api.CodePathRequired {
		t.Fatalf("a purchase without a path token: %d %+v, want 403 path_required", st, ae)
	}
	if st := alice.do("POST", pathURL, nil, &ae); st != http.StatusForbidden || ae.Code != api.CodeCaptchaFailed {
		t.Fatalf("a path without the captcha: %d %+v, want 403 captcha_failed", st, ae)
	}
	var c api.Captcha
	if st := e.do("POST", "/api/captcha", api.CaptchaRequest{ProductID: id}, &ae); st != http.StatusUnauthorized || ae.Code != api.CodeSignInRequired {
		t.Fatalf("a product's captcha for nobody: %d %+v, want 401 sign_in_required", st, ae)
	}
	if st := alice.do("POST", "/api/captcha", nil, &ae); st != http.StatusBadRequest || ae.Code != api.CodeBadRequest {
		t.Fatalf("a captcha for nothing: %d %+v, want 400 bad_request", st, ae)
	}
	if st := alice.do("POST", "/api/captcha", api.CaptchaRequest{ProductID: id}, &c); st != http.StatusCreated {
		t.Fatalf("a captcha: %d", st)
	}
	digits := e.srv.Redis().HGet(t.Context(), "seckill:captcha:"+c.ID, "answer").Val() // what a person reads off the image
	var p api.Path
	if st := alice.do("POST", pathURL, api.PathRequest{CaptchaID: c.ID, Captcha: digits}, &p); st != http.StatusCreated || p.Token == "" {
		t.Fatalf("a path for the solved captcha: %d %+v", st, p)
	}
	if st := bob.do("POST", "/api/orders", map[string]any{"product_id": id, "path_token": p.Token}, &ae); st != http.StatusForbidden || ae.Code != api.CodePathRequired {
		t.Fatalf("another buyer with alice's token: %d %+v, want 403 path_required", st, ae)
	}
	if st := alice.do("POST", "/api/orders", map[string]any{"product_id": id, "path_token": p.Token}, nil); st != http.StatusCreated {
		t.Fatalf("alice with her token: %d", st)
	}
	if st := alice.do("POST", "/api/orders", map[string]any{"product_id": id, "path_token": p.Token}, &ae); st != http.StatusForbidden || ae.Code != api.CodePathUsed {
		t.Fatalf("her token again: %d %+v, want 403 path_used", st, ae)
	}
	if a := e.audit(id); a.Orders != 1 || a.Remaining != 4 {
		t.Errorf("audit %+v, want one sold", a)
	}
	plain := e.reset(product{"stock": 5, "lab": false})
	if st := alice.do("POST", fmt.Sprintf("/api/products/%d/path", plain), nil, &ae); st != http.StatusBadRequest {
		t.Errorf("a path for a product without one: %d %+v, want 400", st, ae)
	}
}

// Captchas and their images are inside the per-address rate, and an
// address makes at most its quota of captchas however slowly it asks.
func TestCaptchasInsideTheAddressLimits(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	e := serve(t, server.Deps{
		Captchas:   admission.NewCaptchas(rdb, admission.CaptchaOptions{PerAddress: 1}),
		PerAddress: admission.NewPerAddress(rdb, 2, time.Hour),
	})
	var c api.Captcha
	if st := e.do("POST", "/api/captcha", api.CaptchaRequest{For: api.CaptchaForAccount}, &c); st != http.StatusCreated {
		t.Fatalf("a captcha: %d", st)
	}
	if st := e.do("GET", c.Image, nil, nil); st != http.StatusOK {
		t.Fatalf("its image: %d", st)
	}
	var ae api.Error
	if st := e.do("GET", c.Image, nil, &ae); st != http.StatusTooManyRequests || ae.Code != api.CodeRateLimited {
		t.Fatalf("its image past the address's rate: %d %+v, want 429 rate_limited", st, ae)
	}

	quota := serve(t, server.Deps{Captchas: admission.NewCaptchas(rdb, admission.CaptchaOptions{PerAddress: 1})})
	if st := quota.do("POST", "/api/captcha", api.CaptchaRequest{For: api.CaptchaForAccount}, &ae); st != http.StatusTooManyRequests || ae.Code != api.CodeRateLimited {
		t.Fatalf("a second captcha from the address, with no rate: %d %+v, want 429 rate_limited (its quota)", st, ae)
	}
}
