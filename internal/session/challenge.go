package session

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"
)

// A passkey sign-in's challenge carries its own proof, so that beginning
// a sign-in, which anyone may do without an account, stores nothing: 16
// random bytes, the challenge's expiry (Unix milliseconds, 8 bytes big
// endian) and an HMAC-SHA256 over a label and both, cut to 16 bytes, under
// a key derived from the session secret. Every instance sharing the secret
// takes the challenges of the others. Only a verified assertion costs a
// Redis key: its challenge, marked used until it expires (Passkeys.spend).
const (
	challengeRandom = 16
	challengeBody   = challengeRandom + 8
	challengeMAC    = 16
	challengeLen    = challengeBody + challengeMAC
)

// challengeLabel is what the MAC is over besides the challenge: a sign-in
// challenge of this format and no other thing the key might one day sign.
const challengeLabel = "passkey sign-in challenge v1"

// challenges mints and checks sign-in challenges.
type challenges struct {
	key []byte
	now func() time.Time
}

func newChallenges(k *Keys, now func() time.Time) challenges {
	return challenges{key: k.derive(challengeLabel), now: now}
}

// mint is a new challenge, good for ChallengeTTL.
func (c challenges) mint() []byte {
	b := make([]byte, challengeRandom, challengeLen)
	rand.Read(b) // never fails (crypto/rand, Go 1.24)
	b = binary.BigEndian.AppendUint64(b, uint64(c.now().Add(ChallengeTTL).UnixMilli()))
	return append(b, c.sum(b)...)
}

// check says when challenge b expires, if it is one of ours and has not:
// else ErrChallengeExpired, as for one used already.
func (c challenges) check(b []byte) (time.Time, error) {
	if len(b) != challengeLen {
		return time.Time{}, fmt.Errorf("%w: not a challenge of ours (%d bytes)", ErrChallengeExpired, len(b))
	}
	if !hmac.Equal(b[challengeBody:], c.sum(b[:challengeBody])) {
		return time.Time{}, fmt.Errorf("%w: not a challenge of ours", ErrChallengeExpired)
	}
	exp := time.UnixMilli(int64(binary.BigEndian.Uint64(b[challengeRandom:challengeBody])))
	if !c.now().Before(exp) {
		return time.Time{}, fmt.Errorf("%w: expired at %s", ErrChallengeExpired, exp.UTC().Format(time.RFC3339))
	}
	return exp, nil
}

// sum is the MAC of a challenge's random bytes and expiry.
func (c challenges) sum(body []byte) []byte {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(challengeLabel))
	m.Write(body)
	return m.Sum(nil)[:challengeMAC]
}
