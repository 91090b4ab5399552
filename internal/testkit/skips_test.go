package testkit_test

import (
	"strings"
	"testing"

	"seckill/internal/testkit"
)

// TestSkipSummarized runs two skipping tests and a passing one, and checks
// that the summary's line names the skipped ones by what they lacked; a plain
// t.Skip (a -short skip) is not in it.
func TestSkipSummarized(t *testing.T) {
	defer testkit.SwapSkips()()
	if line := testkit.SkipLine("pkg"); line != "" {
		t.Fatalf("summary of no skips is %q; want none", line)
	}
	t.Run("Redis", func(t *testing.T) { testkit.Skip(t, "widget-server", "no widget-server") })
	t.Run("MQ", func(t *testing.T) { testkit.Skipf(t, "WidgetMQ", "%s is unset", "WIDGET_URL") })
	t.Run("short", func(t *testing.T) { t.Skip("-short") })
	t.Run("runs", func(t *testing.T) {})
	for range 5 {
		t.Run("many", func(t *testing.T) { testkit.Skip(t, "many-server", "no many-server") })
	}
	line := testkit.SkipLine("pkg")
	for _, want := range []string{"pkg: skipped 7 tests: ", "widget-server absent (TestSkipSummarized/Redis)", "WidgetMQ absent (TestSkipSummarized/MQ)",
		"many-server absent (TestSkipSummarized/many, TestSkipSummarized/many#01, TestSkipSummarized/many#02, TestSkipSummarized/many#03 and 1 more)"} {
		if !strings.Contains(line, want) {
			t.Errorf("summary %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "short") {
		t.Errorf("summary %q names a -short skip", line)
	}
}
