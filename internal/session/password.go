package session

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
)

// ErrWeakPassword: a password too short, too long, or too easy to guess
// (on the list of common passwords, one character repeated, the name).
var ErrWeakPassword = errors.New("session: weak password")

// MinPassword is the shortest password an account takes, in characters.
// NIST SP 800-63B-4 (3.1.1.2) asks 15 of a password that is the only
// factor, as it is here (no second factor yet), and 8 beside one; OWASP's
// Authentication Cheat Sheet follows it. Length is what makes a guess
// costly; composition rules are not asked (NIST: SHALL NOT).
const MinPassword = 15

// MaxPassword bounds a password, in characters: long enough for any
// passphrase or manager's password (NIST asks at least 64), short enough
// that a body cannot make the hash read megabytes.
const MaxPassword = 256

// The argon2id parameters: OWASP's Password Storage Cheat Sheet's first
// configuration (m=19 MiB, t=2, p=1), which costs a guesser about as much
// as its stronger ones at a memory a busy instance can give each sign-in.
// A stored hash says the parameters it was made with (the PHC string), so
// raising them later leaves earlier hashes verifiable.
const (
	argonMemory  = 19 * 1024 // KiB
	argonTime    = 2
	argonThreads = 1
	argonSaltLen = 16
	argonKeyLen  = 32
)

//go:embed common_passwords.txt
var commonText []byte

// common holds the common passwords, lower case.
var common = func() map[string]struct{} {
	m := make(map[string]struct{}, 1024)
	sc := bufio.NewScanner(bytes.NewReader(commonText))
	for sc.Scan() {
		if w := strings.TrimSpace(sc.Text()); w != "" && !strings.HasPrefix(w, "#") {
			m[strings.ToLower(w)] = struct{}{}
		}
	}
	return m
}()

// CheckPassword says whether password may be name's: its error wraps
// ErrWeakPassword and says why. A common password is found also under
// digits and signs added around it ("Password123!") and repeated
// ("qwertyqwertyqwerty"), the ways a short common one is stretched to the
// minimum.
func CheckPassword(name, password string) error {
	n := utf8.RuneCountInString(password)
	switch {
	case !utf8.ValidString(password):
		return fmt.Errorf("%w: the password is not UTF-8 text", ErrWeakPassword)
	case n < MinPassword:
		return fmt.Errorf("%w: the password has %d characters; at least %d", ErrWeakPassword, n, MinPassword)
	case n > MaxPassword:
		return fmt.Errorf("%w: the password has %d characters; at most %d", ErrWeakPassword, n, MaxPassword)
	}
	lower := strings.ToLower(password)
	if name != "" && strings.Contains(lower, strings.ToLower(strings.TrimSpace(name))) {
		return fmt.Errorf("%w: the password contains the account's name", ErrWeakPassword)
	}
	core := strings.TrimFunc(lower, func(r rune) bool { return !unicode.IsLetter(r) })
	for _, w := range []string{lower, core, unit(lower), unit(core)} {
		if _, ok := common[w]; ok {
			return fmt.Errorf("%w: the password is, or is made of, a common password: choose a longer phrase of your own", ErrWeakPassword)
		}
	}
	if u := unit(lower); utf8.RuneCountInString(u) <= 3 {
		return fmt.Errorf("%w: the password repeats %q", ErrWeakPassword, u)
	}
	return nil
}

// unit returns the shortest string s repeats ("abab" → "ab"), s itself
// when it repeats none.
func unit(s string) string {
	for n := 1; n <= len(s)/2; n++ {
		if len(s)%n == 0 && strings.Repeat(s[:n], len(s)/n) == s {
			return s[:n]
		}
	}
	return s
}

// hashPassword returns password's argon2id hash as a PHC string, with a
// fresh salt.
func hashPassword(password string) (string, error) {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("drawing a salt: %w", err)
	}
	key := argon2.IDKey([]byte(password), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
		b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// dummyHash is verified against when a name has no account, so that an
// unknown name costs the time of a known one with a wrong password.
var dummyHash, _ = hashPassword("a password no account has; only its time matters")

// passwordMatches reports whether password is the one encoded hashes,
// in time that does not depend on where they differ. A hash it cannot
// read matches nothing.
func passwordMatches(encoded, password string) bool {
	var version, memory, time uint32
	var threads uint8
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false
	}
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &memory, &time, &threads); err != nil {
		return false
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil {
		return false
	}
	want, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(want) == 0 {
		return false
	}
	got := argon2.IDKey([]byte(password), salt, time, memory, threads, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
}
