package testenv

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"seckill/internal/api"
	"seckill/internal/app"
	"seckill/internal/session"
)

// SignIn signs a buyer in by name at the service at base (POST
// /api/sessions) and returns the session: its Token goes in
// Authorization: Bearer on the buyer's requests for products that are not
// lab products.
func SignIn(t testing.TB, base, name string) api.Session {
	t.Helper()
	body, err := json.Marshal(api.SessionRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(base+"/api/sessions", api.MediaType, bytes.NewReader(body))
	if err != nil {
		t.Fatalf("signing %q in: %v", name, err)
	}
	defer resp.Body.Close()
	var s api.Session
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || resp.StatusCode != http.StatusCreated || s.Token == "" {
		t.Fatalf("signing %q in: %d %+v %v", name, resp.StatusCode, s, err)
	}
	return s
}

// SessionSecret is a SESSION_SECRET for the tests that mint their buyers'
// tokens (Token) instead of signing each in.
const SessionSecret = "the tests' session secret, 32 bytes or more"

// minter signs with SessionSecret, which is long enough: NewKeys cannot
// fail on it.
var minter, _ = session.NewKeys(session.Options{Secret: []byte(SessionSecret)})

// Token mints a token for buyer id with SessionSecret, as a service
// configured with it would sign one in, so that a test keeps its numbered
// buyers on products that are not lab products. The service takes it only
// if the buyer has an account: a numbered buyer's is made by Accounts.
// Safe for goroutines that have no *testing.T at hand.
func Token(buyer int64) string {
	tok, err := minter.Issue(session.Buyer{ID: buyer}, "minted-"+strconv.FormatInt(buyer, 10), 0)
	if err != nil {
		panic(err) // HMAC signing does not fail
	}
	return tok.Token
}

// Accounts makes the accounts of numbered buyers for srv (in its database,
// marked in its Redis), so that the service takes their tokens (Token);
// an id that has one already keeps it.
func Accounts(t testing.TB, srv *app.Server, ids ...int64) {
	t.Helper()
	if err := session.NewAccounts(srv.DB()).Numbered(t.Context(), srv.Redis(), ids...); err != nil {
		t.Fatal(err)
	}
}
