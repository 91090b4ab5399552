package durability_test

import (
	"os"
	"testing"

	"seckill/internal/testkit"
)

// TestMain ends the run with one line naming the tests skipped for want of
// a server or a tool (testkit.Skip), which go test shows without -v.
func TestMain(m *testing.M) { os.Exit(testkit.Summarize(m.Run)()) }
