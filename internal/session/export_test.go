package session

// ChallengeExpiryAt is where a sign-in challenge's expiry starts, for the
// tests that change it.
const ChallengeExpiryAt = challengeRandom

// MarkKey is markKey, for tests that wipe an account's mark.
var MarkKey = markKey
