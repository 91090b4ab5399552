package session_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"seckill/internal/session"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

func keys(t testing.TB, secret []byte, now func() time.Time) *session.Keys {
	t.Helper()
	k, err := session.NewKeys(session.Options{Secret: secret, Lifetime: time.Hour, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestTokenCarriesItsBuyer(t *testing.T) {
	k := keys(t, secret, nil)
	tok, err := k.Issue(session.Buyer{ID: 42, Name: "alice"}, "s1", 3)
	if err != nil {
		t.Fatal(err)
	}
	if until := time.Until(tok.Expires); until < 59*time.Minute || until > time.Hour {
		t.Errorf("expires in %s, want the lifetime (1h)", until)
	}
	c, err := k.Parse(tok.Token)
	if err != nil || c.Buyer != (session.Buyer{ID: 42, Name: "alice"}) || c.Session != "s1" || c.Generation != 3 {
		t.Errorf("Parse: %+v %v, want buyer 42 alice of session s1, generation 3", c, err)
	}
}

// TestBadTokensAreRefused: every way a token can be wrong is ErrInvalid.
func TestBadTokensAreRefused(t *testing.T) {
	now := time.Now()
	k := keys(t, secret, nil)
	good, err := k.Issue(session.Buyer{ID: 42}, "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	other := keys(t, []byte("another secret, just as long as it"), nil)
	foreign, _ := other.Issue(session.Buyer{ID: 42}, "s1", 0)
	old := keys(t, secret, func() time.Time { return now.Add(-2 * time.Hour) })
	expired, _ := old.Issue(session.Buyer{ID: 42}, "s1", 0)
	sign := func(m jwt.SigningMethod, key any, c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(m, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	claims := jwt.MapClaims{"sub": "42", "iss": "seckill", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "sid": "s1"}
	parts := strings.Split(good.Token, ".")
	// The payload of buyer 43 under buyer 42's signature.
	tampered := parts[0] + "." + strings.Split(sign(jwt.SigningMethodHS256, []byte("x"), jwt.MapClaims{"sub": "43", "iss": "seckill",
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}), ".")[1] + "." + parts[2]
	noExp := jwt.MapClaims{"sub": "42", "iss": "seckill", "iat": now.Unix()}
	for name, token := range map[string]string{
		"signed with another secret": foreign.Token,
		"expired":                    expired.Token,
		"tampered":                   tampered,
		"HS512":                      sign(jwt.SigningMethodHS512, secret, claims),
		"alg none":                   sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims),
		"no expiry":                  sign(jwt.SigningMethodHS256, secret, noExp),
		"another issuer":             sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "42", "iss": "x", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}),
		"subject not a buyer id":     sign(jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "alice", "iss": "seckill", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}),
		"garbage":                    "not.a.token",
	} {
		if b, err := k.Parse(token); !errors.Is(err, session.ErrInvalid) {
			t.Errorf("%s: %+v %v, want ErrInvalid", name, b, err)
		}
	}
	if _, err := k.Parse(""); !errors.Is(err, session.ErrNoToken) {
		t.Errorf("no token: %v, want ErrNoToken", err)
	}
	// The same claims, signed right, pass: the cases above fail for what they name.
	if _, err := k.Parse(sign(jwt.SigningMethodHS256, secret, claims)); err != nil {
		t.Errorf("a well-made token: %v", err)
	}
}

// signHS256 signs claims with key, as one who holds the key would.
func signHS256(t testing.TB, key []byte, claims map[string]any) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims(claims)).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestShortSecretIsRefused(t *testing.T) {
	if _, err := session.NewKeys(session.Options{Secret: []byte("short")}); err == nil {
		t.Error("a 5-byte secret was taken")
	}
}

func TestCleanName(t *testing.T) {
	for in, want := range map[string]string{"  alice ": "alice", "Zoë": "Zoë", strings.Repeat("a", session.MaxName): strings.Repeat("a", session.MaxName)} {
		if got, err := session.CleanName(in); err != nil || got != want {
			t.Errorf("CleanName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "   ", strings.Repeat("a", session.MaxName+1), "a\x00b", "tab\there", "bell\a", "\xff\xfe"} {
		if got, err := session.CleanName(in); !errors.Is(err, session.ErrBadName) {
			t.Errorf("CleanName(%q) = %q, %v; want ErrBadName", in, got, err)
		}
	}
}

func BenchmarkIssue(b *testing.B) {
	k := keys(b, secret, nil)
	for b.Loop() {
		if _, err := k.Issue(session.Buyer{ID: 6755399441055745, Name: "alice"}, "s1", 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	k := keys(b, secret, nil)
	tok, err := k.Issue(session.Buyer{ID: 6755399441055745, Name: "alice"}, "s1", 0)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := k.Parse(tok.Token); err != nil {
			b.Fatal(err)
		}
	}
}
