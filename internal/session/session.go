// Package session says who a buyer is: a name kept durably as a buyer id
// (Buyers), and a signed, expiring token that carries that id from one
// request to the next (Keys). The token is a JWT (HS256) made and checked
// with github.com/golang-jwt/jwt/v5; every instance that shares the key
// accepts the tokens of the others.
package session

import (
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Errors Verify wraps; each is a 401 to the client, which signs in again.
var (
	// ErrNoToken: the request carried no token.
	ErrNoToken = errors.New("session: no token")
	// ErrInvalid: the token is malformed, tampered with, signed with
	// another key or algorithm, or expired.
	ErrInvalid = errors.New("session: invalid token")
)

// MinSecret is the shortest signing key Keys takes: RFC 7518 (3.2) asks for
// a key at least as long as the hash's output, 256 bits for HS256.
const MinSecret = 32

// DefaultLifetime is Options.Lifetime's default: a sale's evening, short
// enough that a leaked token does not outlive it by much.
const DefaultLifetime = time.Hour

// issuer names the tokens' maker, so that a token of another service
// that happens to share the key is not taken for one of ours.
const issuer = "seckill"

// leeway forgives clocks of two instances that disagree by this much.
const leeway = time.Second

// Options configure Keys.
type Options struct {
	// Secret signs and checks the tokens; at least MinSecret bytes.
	// Required.
	Secret []byte
	// Lifetime is how long a token is good for. Default: DefaultLifetime.
	Lifetime time.Duration
	// Now reads the clock. Default: time.Now.
	Now func() time.Time
}

// Keys makes and checks buyer tokens.
type Keys struct {
	secret   []byte
	lifetime time.Duration
	now      func() time.Time
	parser   *jwt.Parser
}

// Token is a buyer's signed token.
type Token struct {
	Token   string
	Buyer   int64
	Name    string
	Expires time.Time
}

// Claims are what a verified token says.
type Claims struct {
	Buyer Buyer
	// Session is the token's session id (sid): logging out revokes it.
	Session string
	// Generation is the account's password generation when the token was
	// made: a change of password ends every token of an earlier one.
	Generation int64
	Expires    time.Time
}

// claims are a token's: the registered ones, the buyer's id as the
// subject, the session's id, the account's password generation and the
// name for the page to show.
type claims struct {
	Name       string `json:"name,omitempty"`
	Session    string `json:"sid"`
	Generation int64  `json:"gen,omitempty"`
	jwt.RegisteredClaims
}

// NewKeys builds Keys from opt.
func NewKeys(opt Options) (*Keys, error) {
	if len(opt.Secret) < MinSecret {
		return nil, fmt.Errorf("session: the secret must be at least %d bytes, not %d", MinSecret, len(opt.Secret))
	}
	if opt.Lifetime <= 0 {
		opt.Lifetime = DefaultLifetime
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	k := &Keys{secret: opt.Secret, lifetime: opt.Lifetime, now: opt.Now}
	// Only HS256: a token that names "none" or an RSA algorithm (whose
	// public key an attacker would feed as the HMAC secret) is refused
	// before its signature is looked at.
	k.parser = jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithLeeway(leeway),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithIssuer(issuer), jwt.WithTimeFunc(opt.Now))
	return k, nil
}

// Lifetime is how long a token Issue makes is good for.
func (k *Keys) Lifetime() time.Duration { return k.lifetime }

// Issue makes a token for the buyer's session sid, of the account's
// password generation gen.
func (k *Keys) Issue(b Buyer, sid string, gen int64) (Token, error) {
	now := k.now()
	exp := now.Add(k.lifetime)
	c := claims{Name: b.Name, Session: sid, Generation: gen, RegisteredClaims: jwt.RegisteredClaims{
		Issuer: issuer, Subject: strconv.FormatInt(b.ID, 10),
		IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(exp),
	}}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(k.secret)
	if err != nil {
		return Token{}, fmt.Errorf("signing a token for buyer %d: %w", b.ID, err)
	}
	// The expiry in the token is whole seconds: say the one it holds.
	return Token{Token: s, Buyer: b.ID, Name: b.Name, Expires: c.ExpiresAt.Time}, nil
}

// Parse checks a token's signature, issuer and times and returns what it
// says; whether its session is still open is Desk.Verify's to say. Its
// errors wrap ErrNoToken or ErrInvalid, with the reason (expired, bad
// signature…). A token good for longer than the lifetime, or with no
// session id, is refused even when signed with the key: the key signs only
// tokens of the lifetime, so such a token was forged with a leaked key.
func (k *Keys) Parse(token string) (Claims, error) {
	if token == "" {
		return Claims{}, ErrNoToken
	}
	var c claims
	if _, err := k.parser.ParseWithClaims(token, &c, k.key); err != nil {
		return Claims{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	id, err := strconv.ParseInt(c.Subject, 10, 64)
	switch {
	case err != nil || id <= 0:
		return Claims{}, fmt.Errorf("%w: subject %q is not a buyer id", ErrInvalid, c.Subject)
	case c.IssuedAt == nil || c.ExpiresAt.Sub(c.IssuedAt.Time) > k.lifetime+leeway:
		return Claims{}, fmt.Errorf("%w: the token's life is longer than %s", ErrInvalid, k.lifetime)
	case c.Session == "":
		return Claims{}, fmt.Errorf("%w: the token names no session", ErrInvalid)
	}
	return Claims{Buyer: Buyer{ID: id, Name: c.Name}, Session: c.Session, Generation: c.Generation, Expires: c.ExpiresAt.Time}, nil
}

func (k *Keys) key(*jwt.Token) (any, error) { return k.secret, nil }

// derive is a key of its own for purpose, made from the signing secret
// (HKDF-SHA256, RFC 5869): every instance sharing the secret derives the
// same, and what it signs is never mistaken for a token.
func (k *Keys) derive(purpose string) []byte {
	key, err := hkdf.Key(sha256.New, k.secret, nil, "seckill "+purpose, sha256.Size)
	if err != nil { // only for a length past 255 hashes
		panic(fmt.Sprintf("session: deriving the %s key: %v", purpose, err))
	}
	return key
}

// SecretKey is where Redis keeps its copy of the signing key when
// SESSION_SECRET is not set. The key itself lives in the database (table
// secrets, internal/app): the first instance stores one, every instance
// reads it, and a Redis wiped empty gets the copy again.
const SecretKey = "seckill:session-secret"

// SecretBytes is the length of the key an instance makes.
const SecretBytes = 32
