package session

// ChallengeExpiryAt is where a sign-in challenge's expiry starts, for the
// tests that change it.
const ChallengeExpiryAt = challengeRandom
