//go:build !unix

package app

// openFileLimit is 0, unknown, where there is no RLIMIT_NOFILE.
func openFileLimit() int { return 0 }
