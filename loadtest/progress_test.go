package main

import (
	"strings"
	"testing"

	"seckill/internal/api"
	"seckill/internal/lab/harness"
)

func progress(p api.RunProgress) harness.Progress { return harness.Progress{RunProgress: p} }

// Off a terminal the bar is plain lines: the first at once, the last at the
// end, each with counts and rate, and no carriage return or escape sequence.
func TestProgressOffTerminalIsPlainLines(t *testing.T) {
	var out strings.Builder
	bar := newProgressBar(&syncWriter{w: &out})
	bar.update("token/rmw", progress(api.RunProgress{Total: 100}))
	bar.update("token/rmw", progress(api.RunProgress{Total: 100, Done: 40, OK: 10, SoldOut: 30}))
	bar.update("token/rmw", progress(api.RunProgress{Total: 100, Done: 100, OK: 10, SoldOut: 90}))
	bar.finish()
	if strings.ContainsAny(out.String(), "\r\x1b") {
		t.Errorf("the output redraws: %q", out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want the first and the last (the next is due in %s):\n%s", len(lines), lineEvery, out.String())
	}
	for i, want := range []string{"(0/100)", "sold out 90  errors 0  100% "} {
		if !strings.HasPrefix(lines[i], "token/rmw") || !strings.Contains(lines[i], want) || strings.Contains(lines[i], "req/") != (i == 1) {
			t.Errorf("line %q: want the label, %q, and the rate on the last line only (none before an answer: issue 41's \"0 req/hr\")", lines[i], want)
		}
	}
}

// A phase watched off a terminal shows its counts at once and its last
// counts when it stops, and the bar is free for the next phase.
func TestWatchShowsAPhaseFromStartToEnd(t *testing.T) {
	var out strings.Builder
	bar := newProgressBar(&syncWriter{w: &out})
	for _, phase := range []string{"opening warm", "opening cold"} {
		counts := phaseCounts{total: 4}
		stop := bar.watch(phase, counts.progress)
		counts.add(201, "", nil)
		counts.add(409, api.CodeSoldOut, nil)
		counts.add(503, api.CodeUnavailable, nil)
		counts.add(409, api.CodeNotStarted, nil)
		stop()
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want each phase's first and last:\n%s", len(lines), out.String())
	}
	for i, l := range lines {
		phase := []string{"opening warm", "opening cold"}[i/2]
		if !strings.HasPrefix(l, phase+" ") {
			t.Errorf("line %q is not phase %q's", l, phase)
		}
	}
	for _, i := range []int{1, 3} {
		if !strings.Contains(lines[i], "ok 1  sold out 1  errors 1 ") || !strings.Contains(lines[i], "(4/4") {
			t.Errorf("last line %q: want 4 of 4 answered, 1 bought, 1 sold out, 1 not meant", lines[i])
		}
	}
}

// The opening's early clicks are answered before the bar has measured a
// rate: a line then says no rate rather than "0 req/hr" (issue 41).
func TestNoZeroRate(t *testing.T) {
	for _, tc := range []struct {
		line string
		done int64
		want string
	}{
		{"opening warm (0/21013, 0 req/hr) [0s:0s]", 0, "opening warm (0/21013) [0s:0s]"},
		{"opening warm (176/21013, 0 req/hr) [2s:0s]", 176, "opening warm (176/21013) [2s:0s]"},
		{"opening warm (254/21013, 58 req/s) [4s:5m55s]", 254, "opening warm (254/21013, 58 req/s) [4s:5m55s]"},
		{"opening warm (254/21013, 0.5 req/s) [4s:5m55s]", 254, "opening warm (254/21013, 0.5 req/s) [4s:5m55s]"},
	} {
		if got := meaningfulRate(tc.line, tc.done); got != tc.want {
			t.Errorf("meaningfulRate(%q, %d) = %q, want %q", tc.line, tc.done, got, tc.want)
		}
	}
}
