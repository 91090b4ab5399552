package server_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/go-webauthn/webauthn/protocol/webauthncbor"

	"seckill/internal/api"
	"seckill/internal/testkit/testenv"
)

var b64 = base64.RawURLEncoding

// softKey is a software authenticator: one ES256 (ECDSA P-256) credential
// that answers ceremonies as a browser would hand them on, attestation
// "none", with user presence and verification. rpID and origin are what
// it claims; a test changes them to play another site.
type softKey struct {
	priv   *ecdsa.PrivateKey
	id     []byte
	handle []byte // the user handle the registration gave it
	rpID   string
	origin string
	count  uint32
}

func newSoftKey(t testing.TB, rpID, origin string) *softKey {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &softKey{priv: priv, id: []byte(rand.Text()), rpID: rpID, origin: origin}
}

// Authenticator data flags (WebAuthn §6.1).
const (
	flagUP = 0x01 // user present
	flagUV = 0x04 // user verified
	flagAT = 0x40 // attested credential data follows
)

// authData is rpIdHash | flags | signCount, then what follows.
func (k *softKey) authData(flags byte, rest ...byte) []byte {
	h := sha256.Sum256([]byte(k.rpID))
	d := append(h[:], flags)
	d = binary.BigEndian.AppendUint32(d, k.count)
	return append(d, rest...)
}

func (k *softKey) clientData(t testing.TB, kind, challenge string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"type": kind, "challenge": challenge, "origin": k.origin, "crossOrigin": false})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// create answers creation options: the credential, its COSE key in the
// attested credential data, an attestation object of format "none".
func (k *softKey) create(t testing.TB, opts creationOptions) map[string]any {
	t.Helper()
	k.handle = mustB64(t, opts.PublicKey.User.ID)
	pub := k.priv.PublicKey
	x, y := make([]byte, 32), make([]byte, 32)
	pub.X.FillBytes(x)
	pub.Y.FillBytes(y)
	cose, err := webauthncbor.Marshal(map[int]any{1: 2, 3: -7, -1: 1, -2: x, -3: y}) // EC2, ES256, P-256
	if err != nil {
		t.Fatal(err)
	}
	attested := make([]byte, 16) // AAGUID: none
	attested = binary.BigEndian.AppendUint16(attested, uint16(len(k.id)))
	attested = append(append(attested, k.id...), cose...)
	att, err := webauthncbor.Marshal(map[string]any{"fmt": "none", "attStmt": map[string]any{}, "authData": k.authData(flagUP|flagUV|flagAT, attested...)})
	if err != nil {
		t.Fatal(err)
	}
	return map[string]any{"id": b64.EncodeToString(k.id), "rawId": b64.EncodeToString(k.id), "type": "public-key",
		"response": map[string]any{"clientDataJSON": b64.EncodeToString(k.clientData(t, "webauthn.create", opts.PublicKey.Challenge)),
			"attestationObject": b64.EncodeToString(att)}}
}

// get answers a challenge with an assertion at the key's count: a
// signature over authenticatorData | SHA-256(clientDataJSON).
func (k *softKey) get(t testing.TB, challenge string) map[string]any {
	t.Helper()
	ad := k.authData(flagUP | flagUV)
	cd := k.clientData(t, "webauthn.get", challenge)
	cdHash := sha256.Sum256(cd)
	digest := sha256.Sum256(append(append([]byte{}, ad...), cdHash[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, k.priv, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	return map[string]any{"id": b64.EncodeToString(k.id), "rawId": b64.EncodeToString(k.id), "type": "public-key",
		"response": map[string]any{"clientDataJSON": b64.EncodeToString(cd), "authenticatorData": b64.EncodeToString(ad),
			"signature": b64.EncodeToString(sig), "userHandle": b64.EncodeToString(k.handle)}}
}

func mustB64(t testing.TB, s string) []byte {
	t.Helper()
	b, err := b64.DecodeString(s)
	if err != nil {
		t.Fatalf("%q is not base64url: %v", s, err)
	}
	return b
}

type creationOptions struct {
	PublicKey struct {
		Challenge string
		RP        struct{ ID string }
		User      struct{ ID string }
	} `json:"publicKey"`
}

type requestOptions struct {
	PublicKey struct {
		Challenge string
		RPID      string `json:"rpId"`
	} `json:"publicKey"`
}

// relyingParty is the service's passkey origin, as the page learns it.
func (e *env) relyingParty() (id, origin string) {
	e.t.Helper()
	var o api.AccountOptions
	if st := e.do("GET", "/api/accounts/options", nil, &o); st != http.StatusOK || !o.Passkeys || len(o.PasskeyOrigins) == 0 {
		e.t.Fatalf("GET /api/accounts/options: %d %+v, want passkeys and their origins", st, o)
	}
	u, err := url.Parse(o.PasskeyOrigins[0])
	if err != nil {
		e.t.Fatal(err)
	}
	return u.Hostname(), o.PasskeyOrigins[0]
}

// addPasskey registers a new software passkey to e's signed-in buyer.
func (e *env) addPasskey() *softKey {
	e.t.Helper()
	rpID, origin := e.relyingParty()
	k := newSoftKey(e.t, rpID, origin)
	var opts creationOptions
	if st := e.do("POST", "/api/accounts/current/passkeys/begin", nil, &opts); st != http.StatusOK || opts.PublicKey.RP.ID != rpID {
		e.t.Fatalf("beginning a registration: %d %+v, want 200 for rp %q", st, opts, rpID)
	}
	if st := e.do("POST", "/api/accounts/current/passkeys/finish", k.create(e.t, opts), nil); st != http.StatusNoContent {
		e.t.Fatalf("finishing the registration: %d, want 204", st)
	}
	return k
}

// challenge begins a passkey sign-in.
func (e *env) challenge() string {
	e.t.Helper()
	var opts requestOptions
	if st := e.do("POST", "/api/sessions/passkey/begin", nil, &opts); st != http.StatusOK || opts.PublicKey.Challenge == "" {
		e.t.Fatalf("beginning a passkey sign-in: %d %+v", st, opts)
	}
	return opts.PublicKey.Challenge
}

// finish sends an assertion; a session on success, the refusal otherwise.
func (e *env) finish(assertion map[string]any) (int, api.Session, api.Error) {
	e.t.Helper()
	var raw json.RawMessage
	st := e.do("POST", "/api/sessions/passkey/finish", assertion, &raw)
	var (
		s  api.Session
		ae api.Error
	)
	out := any(&ae)
	if st == http.StatusCreated {
		out = &s
	}
	if err := json.Unmarshal(raw, out); err != nil {
		e.t.Fatalf("decoding %s: %v", raw, err)
	}
	return st, s, ae
}

// TestPasskeySignIn: a buyer who signed up with a password adds a
// passkey and signs in with it, no name typed, as the same buyer; the
// session is a password sign-in's: signing out ends it, and so does a
// change of password, which removes the account's passkeys too.
func TestPasskeySignIn(t *testing.T) {
	e := startDefault(t)
	name := uniqueName("Pat Passkey")
	pat, acct := e.signUp(name, password)
	k := pat.addPasskey()

	k.count = 1
	st, s, ae := e.finish(k.get(t, e.challenge()))
	if st != http.StatusCreated || s.BuyerID != acct.BuyerID || s.Token == "" {
		t.Fatalf("signing in with the passkey: %d %+v %+v, want 201 as buyer %d", st, s, ae, acct.BuyerID)
	}
	withKey := *e
	withKey.buyer = s.Token
	var cur api.CurrentSession
	if st := withKey.do("GET", "/api/sessions/current", nil, &cur); st != http.StatusOK || cur.BuyerID != acct.BuyerID {
		t.Fatalf("the passkey's session: %d %+v", st, cur)
	}
	if st := withKey.do("DELETE", "/api/sessions/current", nil, nil); st != http.StatusNoContent {
		t.Fatalf("signing the passkey's session out: %d", st)
	}
	if st := withKey.do("GET", "/api/sessions/current", nil, nil); st != http.StatusUnauthorized {
		t.Errorf("the passkey's session after signing out: %d, want 401", st)
	}

	k.count = 2
	_, s, _ = e.finish(k.get(t, e.challenge()))
	withKey.buyer = s.Token
	if st := pat.do("POST", "/api/accounts/current/password", api.PasswordChange{Password: password, NewPassword: password + " and more"}, nil); st != http.StatusNoContent {
		t.Fatalf("changing the password: %d", st)
	}
	if st := withKey.do("GET", "/api/sessions/current", nil, nil); st != http.StatusUnauthorized {
		t.Errorf("the passkey's session after a change of password: %d, want 401", st)
	}
	// The passkey went with the old password: one added by whoever held
	// the token or the password does not survive the owner taking the
	// account back.
	k.count = 3
	if st, s, ae := e.finish(k.get(t, e.challenge())); st != http.StatusUnauthorized || s.Token != "" || ae.Code != api.CodePasskeyFailed {
		t.Errorf("the passkey after a change of password: %d %+v %+v, want 401 passkey_failed", st, s, ae)
	}
}

// TestPasskeyRefusals: what a passkey sign-in refuses, each on its own
// check: an assertion sent again (its challenge is used up, and its count
// is not past the last), one made for another origin or another relying
// party, a fresh signature over a challenge already used, and a signature
// count that went backwards (a cloned authenticator). None opens a session.
func TestPasskeyRefusals(t *testing.T) {
	e := startDefault(t)
	pat, _ := e.signUp(uniqueName("Pat Refused"), password)
	k := pat.addPasskey()
	k.count = 10
	first := k.get(t, e.challenge())
	if st, _, ae := e.finish(first); st != http.StatusCreated {
		t.Fatalf("the honest sign-in: %d %+v", st, ae)
	}
	refused := func(what string, assertion map[string]any, code string) {
		t.Helper()
		st, s, ae := e.finish(assertion)
		if st != http.StatusUnauthorized || s.Token != "" || (code != "" && ae.Code != code) {
			t.Errorf("%s: %d %+v %+v, want 401 %s and no token", what, st, s, ae, code)
		}
		t.Logf("%s: %d %s: %s", what, st, ae.Code, ae.Error)
	}

	refused("the same assertion again", first, "")

	k.count = 11
	used := first["response"].(map[string]any)["clientDataJSON"].(string)
	var cd struct{ Challenge string }
	if err := json.Unmarshal(mustB64(t, used), &cd); err != nil {
		t.Fatal(err)
	}
	refused("a new signature over a used challenge", k.get(t, cd.Challenge), api.CodeChallengeExpired)

	honest := k.origin
	k.count, k.origin = 12, "http://evil.example"
	refused("an assertion made for another origin", k.get(t, e.challenge()), api.CodePasskeyFailed)
	k.origin = honest

	rpID := k.rpID
	k.count, k.rpID = 13, "evil.example"
	refused("an assertion for another relying party", k.get(t, e.challenge()), api.CodePasskeyFailed)
	k.rpID = rpID

	k.count = 9
	refused("a signature count below the last", k.get(t, e.challenge()), api.CodePasskeyFailed)

	k.count = 14
	if st, _, ae := e.finish(k.get(t, e.challenge())); st != http.StatusCreated {
		t.Errorf("the honest key after the refusals: %d %+v, want 201", st, ae)
	}
}

// TestPasskeyRoutesInsideTheAddressRate: the passkey sign-in's begin and
// finish count in the client address's rate as a password sign-in does:
// a burst from one address gets at most the rate through per second, the
// rest 429 rate_limited.
func TestPasskeyRoutesInsideTheAddressRate(t *testing.T) {
	const rate, burst = 3, 20
	e := rateLimited(t, rate)
	for _, path := range []string{"/api/sessions/passkey/begin", "/api/sessions/passkey/finish"} {
		cl := fromOwnAddress(e)
		answers := make([]answer, burst)
		begin := time.Now()
		for i := range answers {
			answers[i] = cl.call(nil, "POST", path, map[string]any{}, nil)
		}
		tally(t, path, answers, rate, windows(begin, time.Now()))
		if n := count429(answers); n == 0 {
			t.Errorf("%s: none of %d requests from one address was refused at a rate of %d a second", path, burst, rate)
		}
	}
}

// TestPasskeyChallengeAcrossInstances: a sign-in's challenge is signed,
// not stored: one begun on an instance finishes on another that shares
// the session secret, and one begun on an instance with a secret of its
// own is refused elsewhere (and elsewhere's there), though all three share
// one Redis and one database.
func TestPasskeyChallengeAcrossInstances(t *testing.T) {
	all := startSharing(t, "", "", rand.Text()+rand.Text()) // the third: 52 bytes of its own
	a, b, other := all[0], all[1], all[2]
	pat, acct := a.signUp(uniqueName("Pat Across"), password)
	k := pat.addPasskey()

	k.count = 1
	if st, s, ae := b.finish(k.get(t, a.challenge())); st != http.StatusCreated || s.BuyerID != acct.BuyerID {
		t.Errorf("begun on a, finished on b: %d %+v %+v, want 201 as buyer %d", st, s, ae, acct.BuyerID)
	}
	for i, pair := range []struct{ begin, finish *env }{{other, a}, {a, other}} {
		k.count = uint32(2 + i)
		if st, s, ae := pair.finish.finish(k.get(t, pair.begin.challenge())); st != http.StatusUnauthorized || s.Token != "" || ae.Code != api.CodeChallengeExpired {
			t.Errorf("a challenge under another secret (%d): %d %+v %+v, want 401 %s", i, st, s, ae, api.CodeChallengeExpired)
		}
	}
	k.count = 4
	if st, _, ae := a.finish(k.get(t, b.challenge())); st != http.StatusCreated {
		t.Errorf("begun on b, finished on a after the refusals: %d %+v, want 201", st, ae)
	}
}

// TestPasskeyAssertionOnce: an authenticator that keeps no signature
// count (it sends 0 each time), so that only the challenge's use stops a
// replay: the same assertion sent at once to two instances, several times
// each, opens exactly one session, and sent again after, none; the
// refused are 401 challenge_expired.
func TestPasskeyAssertionOnce(t *testing.T) {
	both := startSharing(t, "", "")
	a, b := both[0], both[1]
	pat, _ := a.signUp(uniqueName("Pat Once"), password)
	k := pat.addPasskey() // count 0, and it stays 0
	assertion := k.get(t, a.challenge())

	const each = 4
	type result struct {
		st int
		ae api.Error
	}
	results := make(chan result, 2*each)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 * each {
		e := []*env{a, b}[i%2]
		wg.Go(func() {
			<-gate
			st, _, ae := e.finish(assertion)
			results <- result{st, ae}
		})
	}
	close(gate)
	wg.Wait()
	close(results)
	sessions := 0
	for r := range results {
		switch {
		case r.st == http.StatusCreated:
			sessions++
		case r.st != http.StatusUnauthorized || r.ae.Code != api.CodeChallengeExpired:
			t.Errorf("a finish that lost: %d %+v, want 401 %s", r.st, r.ae, api.CodeChallengeExpired)
		}
	}
	if sessions != 1 {
		t.Errorf("%d finishes of one assertion at once opened %d sessions, want 1", 2*each, sessions)
	}
	if st, s, ae := b.finish(assertion); st != http.StatusUnauthorized || s.Token != "" || ae.Code != api.CodeChallengeExpired {
		t.Errorf("the assertion again: %d %+v %+v, want 401 %s", st, s, ae, api.CodeChallengeExpired)
	}
	if st, _, ae := a.finish(k.get(t, b.challenge())); st != http.StatusCreated {
		t.Errorf("the same key on a fresh challenge: %d %+v, want 201", st, ae)
	}
}

// startSharing starts an instance for each secret, on one Redis and one
// database, all the relying party of one page (an instance's default
// origin has its own port); secret "" is the one the first instance keeps
// in the database.
func startSharing(t *testing.T, secrets ...string) []*env {
	cfg := testenv.Config(t)
	if cfg.MySQLDSN == "" {
		cfg.SQLitePath = t.TempDir() + "/shared.db"
	}
	cfg.RPOrigins = []string{"http://localhost:8080"}
	all := make([]*env, len(secrets))
	for i, s := range secrets {
		cfg.SessionSecret = s
		all[i] = start(t, cfg)
		cfg.RedisAddr = all[0].srv.RedisAddr()
	}
	return all
}

func count429(answers []answer) (n int) {
	for _, a := range answers {
		if a.status == http.StatusTooManyRequests {
			n++
		}
	}
	return n
}

// BenchmarkSignIn is one whole sign-in through the HTTP API, with a
// password (POST /api/sessions: an argon2id verify) and with a passkey
// (begin and finish: a signed challenge, used up in Redis, the credential
// read and its count moved in SQL, one ECDSA P-256 verify), on testenv's
// backends (REDIS_ADDR and MYSQL_DSN when set).
func BenchmarkSignIn(b *testing.B) {
	cfg := testenv.Config(b)
	cfg.LogLevel = "error"
	e := start(b, cfg)
	name := uniqueName("Bench Signin")
	pat, _ := e.signUp(name, password)
	k := pat.addPasskey()
	b.Run("password", func(b *testing.B) {
		for b.Loop() {
			if st := e.do("POST", "/api/sessions", api.SessionRequest{Name: name, Password: password}, nil); st != http.StatusCreated {
				b.Fatalf("a password sign-in: %d", st)
			}
		}
	})
	b.Run("passkey", func(b *testing.B) {
		for b.Loop() {
			k.count++
			if st, _, ae := e.finish(k.get(b, e.challenge())); st != http.StatusCreated {
				b.Fatalf("a passkey sign-in: %d %+v", st, ae)
			}
		}
	})
}
