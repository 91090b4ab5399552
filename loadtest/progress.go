package main

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"

	"seckill/internal/api"
	"seckill/internal/lab/harness"
)

// progressBar shows each run's progress on stderr, with its rate and ETA: a
// bar redrawn in place on a terminal; elsewhere (a log, CI) the same bar as
// a plain line every few seconds and at the end, with no redraw sequences.
// The harness calls it from one goroutine.
type progressBar struct {
	out  io.Writer
	tty  bool
	bar  *progressbar.ProgressBar // the current run's; nil between runs
	last time.Time                // when the last plain line was written
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
	return &progressBar{out: out, tty: tty}
}

func (b *progressBar) update(label string, p harness.Progress) {
	desc := fmt.Sprintf("%-18s ok %d  sold out %d  errors %d ", label, p.OK, p.SoldOut, p.Errors)
	if b.bar == nil {
		w := io.Discard // the plain lines are written from String
		if b.tty {
			w = b.out
		}
		b.bar = progressbar.NewOptions(p.Total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowCount(),
			progressbar.OptionShowIts(),
			progressbar.OptionSetItsString("req"),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetDescription(desc),
		)
	}
	_ = b.bar.Set(p.Done) // errors only on a count past the total, which the harness never reports
	b.bar.Describe(desc)
	if !b.tty && time.Since(b.last) >= lineEvery {
		b.line()
	}
}

// line writes the bar as it stands, as one plain line. Before the first
// answer, and before the bar has measured one (the opening's early answers
// come in its first second), the bar's rate is a meaningless "0 req/hr":
// it is left out.
func (b *progressBar) line() {
	b.last = time.Now()
	fmt.Fprintln(b.out, meaningfulRate(strings.TrimSpace(b.bar.String()), b.bar.State().CurrentNum))
}

// meaningfulRate is the bar's line s, done answers in, without its rate
// where the rate means nothing.
func meaningfulRate(s string, done int64) string {
	if done == 0 {
		s = noRate.ReplaceAllString(s, "")
	}
	return zeroRate.ReplaceAllString(s, "")
}

// noRate matches the rate in the bar's "(0/100, 0 req/hr)"; zeroRate a
// rate of 0 after answers, as in "(176/21013, 0 req/hr)".
var (
	noRate   = regexp.MustCompile(`, [0-9.]+ req/[a-z]+`)
	zeroRate = regexp.MustCompile(`, 0 req/[a-z]+`)
)

// finish ends a run's bar, leaving its last state on a line of its own.
func (b *progressBar) finish() {
	if b.bar == nil {
		return
	}
	if b.tty {
		fmt.Fprintln(b.out)
	} else {
		b.line()
	}
	b.bar, b.last = nil, time.Time{}
}

// phaseCounts are a phase's answers so far, for its bar: answered, bought, sold out,
// and the answers the service did not mean.
type phaseCounts struct {
	total                       int
	done, ok, soldOut, failures atomic.Int64
}

func (p *phaseCounts) add(status int, code string, err error) {
	switch c := classify(status, code, err); {
	case c == answerBought:
		p.ok.Add(1)
	case c == answerSoldOut:
		p.soldOut.Add(1)
	case c >= answerFailed:
		p.failures.Add(1)
	}
	p.done.Add(1)
}

func (p *phaseCounts) progress() harness.Progress {
	return harness.Progress{RunProgress: api.RunProgress{Total: p.total, Done: int(p.done.Load()), OK: int(p.ok.Load()),
		SoldOut: int(p.soldOut.Load()), Errors: int(p.failures.Load())}}
}

// watchEvery is how often watch reads a phase's counts, as the harness
// reports its runs'.
const watchEvery = 200 * time.Millisecond

// watch shows a phase of a scenario that drives the service its own way
// (the opening, overload) on b, from counts read every watchEvery, until
// the returned stop, which leaves the last counts on a line and returns
// once the watcher has.
func (b *progressBar) watch(label string, counts func() harness.Progress) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(watchEvery)
		defer tick.Stop()
		b.update(label, counts())
		for {
			select {
			case <-done:
				b.update(label, counts())
				b.finish()
				return
			case <-tick.C:
				b.update(label, counts())
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}
