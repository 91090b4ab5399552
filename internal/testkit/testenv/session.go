package testenv

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"seckill/internal/api"
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
