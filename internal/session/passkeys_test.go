package session_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"seckill/internal/session"
)

// passkeys is the passkeys of desk d on rdb and db, for a page at
// http://localhost.
func passkeys(t testing.TB, rdb session.ChallengeStore, db *gorm.DB, d *session.Desk) *session.Passkeys {
	t.Helper()
	p, err := session.NewPasskeys(session.PasskeyOptions{RPID: "localhost", Origins: []string{"http://localhost"}, Desk: d, DB: db, Redis: rdb})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// countedStore is Redis as Passkeys reaches it, counting every call.
type countedStore struct {
	redis.UniversalClient
	calls atomic.Int64
}

func (s *countedStore) Set(ctx context.Context, key string, value any, ttl time.Duration) *redis.StatusCmd {
	s.calls.Add(1)
	return s.UniversalClient.Set(ctx, key, value, ttl)
}

func (s *countedStore) SetNX(ctx context.Context, key string, value any, ttl time.Duration) *redis.BoolCmd {
	s.calls.Add(1)
	return s.UniversalClient.SetNX(ctx, key, value, ttl)
}

func (s *countedStore) GetDel(ctx context.Context, key string) *redis.StringCmd {
	s.calls.Add(1)
	return s.UniversalClient.GetDel(ctx, key)
}

// TestPasskeySignInBeginStoresNothing: beginning a passkey sign-in, which
// anyone may do without an account, sends Redis nothing: no key waits for
// an answer that may never come (issue 36's finding: one address could
// keep thousands alive within its rate).
func TestPasskeySignInBeginStoresNothing(t *testing.T) {
	rdb, db := backends(t)
	sent := &countedStore{UniversalClient: rdb}
	p := passkeys(t, sent, db, desk(t, rdb, db, false))
	const begins = 50
	seen := map[string]bool{}
	for range begins {
		opts, err := p.BeginSignIn(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		seen[opts.Response.Challenge.String()] = true
	}
	if n := sent.calls.Load(); n != 0 {
		t.Errorf("%d sign-in begins made %d calls to Redis, want none", begins, n)
	}
	if len(seen) != begins {
		t.Errorf("%d begins drew %d challenges, want each its own", begins, len(seen))
	}
}

// TestPasskeySignInChallenges: a finish takes only a challenge its
// instances minted and that has not expired: one from an instance sharing
// the secret gets past the challenge (to the assertion, here a
// credential no one has: passkey_failed), while one from an instance with
// another secret, one with a byte of its MAC or its expiry changed, one
// cut short, and one past its expiry are refused as expired, on one
// Redis.
func TestPasskeySignInChallenges(t *testing.T) {
	rdb, db := backends(t)
	now := time.Now()
	clock := func(d time.Duration) func() time.Time { return func() time.Time { return now.Add(d) } }
	at := func(s []byte, d time.Duration) *session.Passkeys {
		keys := keys(t, s, clock(d))
		return passkeys(t, rdb, db, session.NewDesk(session.DeskOptions{Keys: keys, Accounts: session.NewAccounts(db), Redis: rdb, Now: clock(d)}))
	}
	mine, twin := at(secret, 0), at(secret, 0)
	stranger := at([]byte("another secret, 32 bytes or more"), 0)
	late := at(secret, session.ChallengeTTL)
	challenge := func(p *session.Passkeys) []byte {
		t.Helper()
		opts, err := p.BeginSignIn(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return opts.Response.Challenge
	}
	for _, tc := range []struct {
		name      string
		challenge []byte
		finish    *session.Passkeys
		want      error
	}{
		{"minted by a twin", challenge(mine), twin, session.ErrPasskeyFailed},
		{"minted by itself", challenge(twin), twin, session.ErrPasskeyFailed},
		{"minted under another secret", challenge(stranger), twin, session.ErrChallengeExpired},
		{"taken under another secret", challenge(mine), stranger, session.ErrChallengeExpired},
		{"a MAC byte flipped", flip(challenge(mine), -1), twin, session.ErrChallengeExpired},
		{"a random byte flipped", flip(challenge(mine), 0), twin, session.ErrChallengeExpired},
		{"the expiry moved on", later(challenge(mine), time.Hour), twin, session.ErrChallengeExpired},
		{"cut short", challenge(mine)[:24], twin, session.ErrChallengeExpired},
		{"a byte more", append(challenge(mine), 0), twin, session.ErrChallengeExpired},
		{"finished at its expiry", challenge(mine), late, session.ErrChallengeExpired},
		{"finished a millisecond before it", challenge(mine), at(secret, session.ChallengeTTL-time.Millisecond), session.ErrPasskeyFailed},
	} {
		_, err := tc.finish.FinishSignIn(t.Context(), unknownAssertion(t, tc.challenge))
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		t.Logf("%s: %v", tc.name, err)
	}
}

func flip(b []byte, i int) []byte {
	if i < 0 {
		i += len(b)
	}
	b[i] ^= 1
	return b
}

func later(b []byte, d time.Duration) []byte {
	at := b[session.ChallengeExpiryAt:]
	binary.BigEndian.PutUint64(at, binary.BigEndian.Uint64(at)+uint64(d.Milliseconds()))
	return b
}

// unknownAssertion answers challenge for http://localhost with a
// credential no account has and no valid signature: a finish that takes
// the challenge fails on the assertion, passkey_failed.
func unknownAssertion(t *testing.T, challenge []byte) []byte {
	t.Helper()
	b64 := base64.RawURLEncoding
	cd, err := json.Marshal(map[string]any{"type": "webauthn.get", "challenge": b64.EncodeToString(challenge), "origin": "http://localhost"})
	if err != nil {
		t.Fatal(err)
	}
	rp := sha256.Sum256([]byte("localhost"))
	ad := append(rp[:], 0x05, 0, 0, 0, 0) // user present and verified, count 0
	id := b64.EncodeToString([]byte("no such credential"))
	body, err := json.Marshal(map[string]any{"id": id, "rawId": id, "type": "public-key",
		"response": map[string]any{"clientDataJSON": b64.EncodeToString(cd), "authenticatorData": b64.EncodeToString(ad),
			"signature": b64.EncodeToString([]byte("not a signature")), "userHandle": b64.EncodeToString([]byte("12345678"))}})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// BenchmarkBeginSignIn is one passkey sign-in's begin: the options the
// browser gets, on backends' Redis (REDIS_ADDR's when set).
func BenchmarkBeginSignIn(b *testing.B) {
	rdb, db := backends(b)
	p := passkeys(b, rdb, db, desk(b, rdb, db, false))
	for b.Loop() {
		if _, err := p.BeginSignIn(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}
