package session

import "testing"

// BenchmarkPasswordVerify is the argon2id work of one sign-in with a
// password (and of one with an unknown name, against the dummy hash): what
// a sign-in costs the instance's CPU, and a guesser per guess.
func BenchmarkPasswordVerify(b *testing.B) {
	hash, err := hashPassword("a long passphrase of my own 7")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if !passwordMatches(hash, "a long passphrase of my own 7") {
			b.Fatal("the password does not match its hash")
		}
	}
}
