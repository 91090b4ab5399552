package testkit

import (
	"testing"

	"seckill/internal/embedded"
)

// MemorySQLite is the DSN of an in-memory SQLite database of the test's
// own, kept until the test ends whatever happens to its connections (see
// embedded.MemorySQLite).
func MemorySQLite(tb testing.TB) string {
	tb.Helper()
	dsn, keep, err := embedded.MemorySQLite(tb.Context(), "")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { keep.Close() })
	return dsn
}
