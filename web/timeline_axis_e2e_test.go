package web_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// On a narrow canvas the axis's ticks come closer than its times are
// wide: a time that would overlap the one before it is left out, its tick
// kept, and two times at least are still said (a review's finding: the
// labels could collide at 390 px, untested).
func TestTimelineAxisTimesNeverOverlap(t *testing.T) {
	browser := findChromium(t)
	srv, _ := startService(t, 7_500_000, 8_500_000)
	ctx := newBrowser(t, browser)
	do(t, ctx, "open the page", chromedp.EmulateViewport(1280, 900), chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitReady(chromedp.CSS("#lab-lock option")))
	for _, width := range []int{150, 240, 390} {
		got := run[string](t, ctx, fmt.Sprintf(`(() => {
			const box = document.createElement("div");
			box.style.width = "%dpx";
			document.body.append(box);
			const bars = [];
			for (let i = 0; i < 40; i++) bars.push({buyer: i + 1, shard: i %% 2, row: 0, kind: "lock", start_us: i * 1250, end_us: i * 1250 + 900});
			window.SeckillTimeline.draw(box, {shards: 2, span_us: 51234, traced: 40, untraced: 0, overlapping: 0, lost_updates: 0,
				rows: [1, 1], bars, sentence: "No two purchases overlapped."});
			const c = box.querySelector(".tl-detail");
			const out = c.dataset.axis + " || " + c.dataset.axisBoxes;
			box.remove();
			return out;
		})()`, width))
		times, boxes, _ := strings.Cut(got, " || ")
		if n := len(strings.Split(times, " | ")); n < 2 || len(strings.Fields(boxes)) != n {
			t.Errorf("%d px: times %q, boxes %q: want two times or more, a box each", width, times, boxes)
			continue
		}
		if !axisClear(boxes) {
			t.Errorf("%d px: the axis's times overlap (boxes %s; times %q)", width, boxes, times)
		}
	}
}
