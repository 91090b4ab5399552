package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"seckill/internal/harness"
)

// progressBar shows a run's progress on stderr: a bar redrawn in place on a
// terminal, a line every few seconds otherwise (a log or CI keeps readable).
// The harness calls it from one goroutine.
type progressBar struct {
	w    io.Writer
	tty  bool
	last time.Time
	drew bool
}

// lineEvery spaces the progress lines when stderr is not a terminal.
const lineEvery = 2 * time.Second

func newProgressBar(out io.Writer) *progressBar {
	w, tty := out, false
	if sw, ok := w.(*syncWriter); ok {
		w = sw.w
	}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil {
			tty = fi.Mode()&os.ModeCharDevice != 0
		}
	}
	return &progressBar{w: out, tty: tty}
}

func (b *progressBar) update(label string, p harness.Progress) {
	counts := fmt.Sprintf("%d/%d  ok %d  sold out %d  errors %d  %.1fs",
		p.Done, p.Total, p.OK, p.SoldOut, p.Errors, p.Elapsed.Seconds())
	if !b.tty {
		if time.Since(b.last) >= lineEvery {
			b.last = time.Now()
			fmt.Fprintf(b.w, "%s: %s\n", label, counts)
		}
		return
	}
	const width = 30
	filled := 0
	if p.Total > 0 {
		filled = min(width, width*p.Done/p.Total)
	}
	fmt.Fprintf(b.w, "\r\033[K%-18s [%s%s] %s", label, strings.Repeat("=", filled), strings.Repeat(" ", width-filled), counts)
	b.drew = true
}

// finish ends a run's bar so that the next run starts on a fresh line.
func (b *progressBar) finish() {
	if b.tty && b.drew {
		fmt.Fprintln(b.w)
	}
	b.drew = false
	b.last = time.Time{}
}
