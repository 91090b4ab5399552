package server_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"seckill/internal/api"
	"seckill/internal/testkit/testenv"
)

const password = "a long passphrase of my own 7"

// uniqueName is a name no other run on a shared Redis uses (the sign-in
// throttle keys its counts by name).
func uniqueName(prefix string) string { return prefix + " " + strings.ToLower(rand.Text()[:8]) }

// signUp makes an account with the password and signs it in.
func (e *env) signUp(name, pw string) (*env, api.Session) {
	e.t.Helper()
	var acct api.Account
	if st := e.do("POST", "/api/accounts", api.AccountRequest{Name: name, Password: pw}, &acct); st != http.StatusCreated || acct.BuyerID < api.FirstNamedBuyer {
		e.t.Fatalf("making the account %q: %d %+v", name, st, acct)
	}
	var s api.Session
	if st := e.do("POST", "/api/sessions", api.SessionRequest{Name: name, Password: pw}, &s); st != http.StatusCreated || s.BuyerID != acct.BuyerID {
		e.t.Fatalf("signing %q in: %d %+v", name, st, s)
	}
	c := *e
	c.buyer = s.Token
	return &c, s
}

// TestNameAloneIsNoCredential (finding 1): a stranger who signs in with
// Dora's name, in any spelling, without her password, gets no token, even
// with the demo sign-in on; a wrong password and an unknown name get the
// same answer; she keeps her order to herself.
func TestNameAloneIsNoCredential(t *testing.T) {
	e := startDefault(t) // testenv turns the demo sign-in on
	id := e.reset(product{"stock": 10, "shards": 1, "lab": false})
	name := uniqueName("Dora Victim")
	dora, _ := e.signUp(name, password)
	var hers api.Order
	if st := dora.do("POST", "/api/orders", map[string]any{"product_id": id}, &hers); st != http.StatusCreated {
		t.Fatalf("dora buys: %d", st)
	}
	answers := map[string]api.Error{}
	for what, req := range map[string]api.SessionRequest{
		"her name, spelled otherwise": {Name: "  " + strings.ToLower(strings.Replace(name, "Victim", "VICTIM", 1)) + " "},
		"her name and a wrong one":    {Name: name, Password: password + "?"},
		"an unknown name":             {Name: uniqueName("nobody"), Password: password + "?"},
	} {
		var ae api.Error
		var s api.Session
		st := e.do("POST", "/api/sessions", req, &s)
		e.do("POST", "/api/sessions", req, &ae)
		if st != http.StatusUnauthorized || s.Token != "" || ae.Code != api.CodeBadCredentials {
			t.Errorf("%s: %d %+v %+v, want 401 %s and no token", what, st, s, ae, api.CodeBadCredentials)
		}
		if req.Password != "" {
			answers[what] = ae
		}
	}
	if a, b := answers["her name and a wrong one"], answers["an unknown name"]; a != b {
		t.Errorf("a wrong password is answered %+v, an unknown name %+v: want the same", a, b)
	}
	stranger := e.as(uniqueName("mallory"))
	for _, action := range []string{"", "/cancel", "/pay"} {
		method, body := "POST", any(map[string]any{})
		if action == "" {
			method, body = "GET", nil
		}
		if st := stranger.do(method, "/api/orders/"+hers.ID+action, body, nil); st != http.StatusNotFound {
			t.Errorf("a stranger %s her order: %d, want 404", strings.TrimPrefix(action+" reads", "/"), st)
		}
	}
	if st := dora.do("GET", "/api/orders/"+hers.ID, nil, &hers); st != http.StatusOK || hers.Status != "unpaid" {
		t.Errorf("dora reads her order: %d %+v, want it unpaid", st, hers)
	}
}

// TestAccountRefusals: a weak password, a name taken, and the options the
// page reads.
func TestAccountRefusals(t *testing.T) {
	e := startDefault(t)
	name := uniqueName("ivy")
	for what, tc := range map[string]struct {
		req  api.AccountRequest
		st   int
		code string
	}{
		"a short password":  {api.AccountRequest{Name: name, Password: "short"}, http.StatusBadRequest, api.CodeWeakPassword},
		"a common password": {api.AccountRequest{Name: name, Password: "Password1234567!"}, http.StatusBadRequest, api.CodeWeakPassword},
		"no name":           {api.AccountRequest{Password: password}, http.StatusBadRequest, api.CodeBadRequest},
	} {
		var ae api.Error
		if st := e.do("POST", "/api/accounts", tc.req, &ae); st != tc.st || ae.Code != tc.code || ae.Error == "" {
			t.Errorf("%s: %d %+v, want %d %s with a message", what, st, ae, tc.st, tc.code)
		}
	}
	e.signUp(name, password)
	var ae api.Error
	if st := e.do("POST", "/api/accounts", api.AccountRequest{Name: strings.ToUpper(name), Password: password}, &ae); st != http.StatusConflict || ae.Code != api.CodeNameTaken {
		t.Errorf("the name again: %d %+v, want 409 %s", st, ae, api.CodeNameTaken)
	}
	var opts api.AccountOptions
	if st := e.do("GET", "/api/accounts/options", nil, &opts); st != http.StatusOK || !opts.Demo || opts.MinPassword < 8 {
		t.Errorf("options: %d %+v, want demo on (testenv's) and a minimum", st, opts)
	}
}

// TestSessionsEndOnEveryInstance: logging out on one instance ends the
// session on the other; changing the password on the other ends every
// session of the account on both.
func TestSessionsEndOnEveryInstance(t *testing.T) {
	a, b := startTwo(t)
	id := a.reset(product{"stock": 10, "shards": 1, "lab": false})
	name := uniqueName("judy")
	first, s := a.signUp(name, password)
	var second api.Session
	if st := a.do("POST", "/api/sessions", api.SessionRequest{Name: name, Password: password}, &second); st != http.StatusCreated {
		t.Fatalf("a second session: %d", st)
	}
	onB := func(token string) *env { c := *b; c.buyer = token; return &c }
	var cur api.CurrentSession
	if st := onB(s.Token).do("GET", "/api/sessions/current", nil, &cur); st != http.StatusOK || cur.BuyerID != s.BuyerID {
		t.Fatalf("b reads a's session: %d %+v", st, cur)
	}
	if st := first.do("DELETE", "/api/sessions/current", nil, nil); st != http.StatusNoContent {
		t.Fatalf("logging out on a: %d, want 204", st)
	}
	var ae api.Error
	if st := onB(s.Token).do("GET", "/api/sessions/current", nil, &ae); st != http.StatusUnauthorized || ae.Code != api.CodeSignInRequired {
		t.Errorf("the logged-out token on b: %d %+v, want 401 %s", st, ae, api.CodeSignInRequired)
	}
	if st := onB(s.Token).do("POST", "/api/orders", map[string]any{"product_id": id}, nil); st != http.StatusUnauthorized {
		t.Errorf("buying on b with the logged-out token: %d, want 401", st)
	}
	if st := onB(second.Token).do("GET", "/api/sessions/current", nil, nil); st != http.StatusOK {
		t.Errorf("the other session after the logout: %d, want 200", st)
	}
	fresh := password + " renewed"
	if st := onB(second.Token).do("POST", "/api/accounts/current/password", api.PasswordChange{Password: password, NewPassword: fresh}, nil); st != http.StatusNoContent {
		t.Fatalf("changing the password on b: %d, want 204", st)
	}
	if st := a.do("GET", "/api/sessions/current", nil, nil); st != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", st)
	}
	c := *a
	c.buyer = second.Token
	if st := c.do("POST", "/api/orders", map[string]any{"product_id": id}, &ae); st != http.StatusUnauthorized || ae.Code != api.CodeSignInRequired {
		t.Errorf("buying on a with a token of the old password: %d %+v, want 401", st, ae)
	}
	if st := a.do("POST", "/api/sessions", api.SessionRequest{Name: name, Password: password}, &ae); st != http.StatusUnauthorized || ae.Code != api.CodeBadCredentials {
		t.Errorf("the old password: %d %+v, want 401 %s", st, ae, api.CodeBadCredentials)
	}
	if st := a.do("POST", "/api/sessions", api.SessionRequest{Name: name, Password: fresh}, nil); st != http.StatusCreated {
		t.Errorf("the new password: %d, want 201", st)
	}
}

// TestOneAddressCannotMakeManyBuyers (finding 2): an address makes its
// few accounts, then is refused with a wait, while another address is
// not; with the captcha on, a network's accounts past the first few need
// one.
func TestOneAddressCannotMakeManyBuyers(t *testing.T) {
	// Addresses of the test's own, so that runs sharing a Redis do not
	// count each other's accounts.
	var nb [2]byte
	_, _ = rand.Read(nb[:])
	net := fmt.Sprintf("10.%d.%d.", nb[0], nb[1])
	server := func(perAddress, beforeCaptcha int) func(addr string, req api.AccountRequest) (int, api.Error, http.Header) {
		cfg := testenv.Config(t)
		cfg.TrustedProxies = []string{"127.0.0.1", "::1"}
		cfg.SignupsAddress, cfg.SignupsNetwork, cfg.SignupsCaptcha = perAddress, 100, beforeCaptcha
		e := start(t, cfg)
		return func(addr string, req api.AccountRequest) (int, api.Error, http.Header) {
			t.Helper()
			req.Password = password
			body, _ := json.Marshal(req)
			r, _ := http.NewRequest("POST", e.url+"/api/accounts", bytes.NewReader(body))
			r.Header.Set("Content-Type", api.MediaType)
			r.Header.Set("X-Forwarded-For", addr)
			resp, err := e.client.Do(r)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var ae api.Error
			_ = json.NewDecoder(resp.Body).Decode(&ae)
			return resp.StatusCode, ae, resp.Header
		}
	}
	limited := server(3, 0)
	for i := range 3 {
		if st, ae, _ := limited(net+"1", api.AccountRequest{Name: uniqueName("sybil")}); st != http.StatusCreated {
			t.Fatalf("account %d of the address: %d %+v, want 201", i, st, ae)
		}
	}
	st, ae, h := limited(net+"1", api.AccountRequest{Name: uniqueName("sybil")})
	if st != http.StatusTooManyRequests || ae.Code != api.CodeRateLimited || h.Get("Retry-After") == "" {
		t.Errorf("a fourth account from the address: %d %+v Retry-After %q, want 429 %s with a wait", st, ae, h.Get("Retry-After"), api.CodeRateLimited)
	}
	if st, ae, _ := limited(net+"2", api.AccountRequest{Name: uniqueName("neighbour")}); st != http.StatusCreated {
		t.Errorf("an account from another address: %d %+v, want 201", st, ae)
	}

	_, _ = rand.Read(nb[:])
	net = fmt.Sprintf("10.%d.%d.", nb[0], nb[1])
	asking := server(100, 2)
	for i := range 2 {
		if st, ae, _ := asking(net+"1", api.AccountRequest{Name: uniqueName("sybil")}); st != http.StatusCreated {
			t.Fatalf("account %d of the network: %d %+v, want 201", i, st, ae)
		}
	}
	if st, ae, _ := asking(net+"2", api.AccountRequest{Name: uniqueName("sybil")}); st != http.StatusForbidden || ae.Code != api.CodeCaptchaRequired {
		t.Errorf("a third account from the network: %d %+v, want 403 %s", st, ae, api.CodeCaptchaRequired)
	}
	if st, ae, _ := asking(net+"2", api.AccountRequest{Name: uniqueName("sybil"), CaptchaID: "nope", Captcha: "123456"}); st != http.StatusForbidden || ae.Code != api.CodeCaptchaFailed {
		t.Errorf("a wrong captcha: %d %+v, want 403 %s", st, ae, api.CodeCaptchaFailed)
	}
}

// TestAccountsBefore: a product with accounts_before sells only to
// accounts made before it.
func TestAccountsBefore(t *testing.T) {
	e := startDefault(t)
	buyer, _ := e.signUp(uniqueName("kim"), password)
	past, future := time.Now().Add(-time.Hour).UTC(), time.Now().Add(time.Hour).UTC()
	old := e.reset(product{"stock": 5, "shards": 1, "lab": false, "accounts_before": past})
	var ae api.Error
	if st := buyer.do("POST", "/api/orders", map[string]any{"product_id": old}, &ae); st != http.StatusForbidden || ae.Code != api.CodeAccountTooNew {
		t.Errorf("an account made after accounts_before buys: %d %+v, want 403 %s", st, ae, api.CodeAccountTooNew)
	}
	open := e.reset(product{"stock": 5, "shards": 1, "lab": false, "accounts_before": future})
	if st := buyer.do("POST", "/api/orders", map[string]any{"product_id": open}, nil); st != http.StatusCreated {
		t.Errorf("an account made before accounts_before buys: %d, want 201", st)
	}
}

// TestPayAndCancelTakeNoBody: a signed-in buyer pays and cancels its
// orders with its token and no body, as docs/API.md shows; without a token
// either, the answer says to sign in, as for {}.
func TestPayAndCancelTakeNoBody(t *testing.T) {
	e := startDefault(t)
	buyer, _ := e.signUp(uniqueName("nadia"), password)
	for _, action := range []string{"pay", "cancel"} {
		id := e.reset(product{"stock": 10, "shards": 1, "lab": false}) // one order a buyer
		var o api.Order
		if st := buyer.do("POST", "/api/orders", map[string]any{"product_id": id}, &o); st != http.StatusCreated {
			t.Fatalf("buying: %d", st)
		}
		want := map[string]string{"pay": "paid", "cancel": "cancelled"}[action]
		var ae api.Error
		if st := e.do("POST", "/api/orders/"+o.ID+"/"+action, nil, &ae); st != http.StatusUnauthorized || ae.Code != api.CodeSignInRequired {
			t.Errorf("%s with no body and no token: %d %+v, want 401 %s", action, st, ae, api.CodeSignInRequired)
		}
		if st := buyer.do("POST", "/api/orders/"+o.ID+"/"+action, nil, &o); st != http.StatusOK || o.Status != want {
			t.Errorf("%s with the buyer's token and no body: %d %+v, want 200 %s", action, st, o, want)
		}
	}
}
