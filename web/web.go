// Package web holds the lab's page: static HTML, CSS and JavaScript with no
// build step. The service serves FS at /.
package web

import (
	"embed"
	"io/fs"
	"strings"

	"seckill/internal/chartjs"
	"seckill/internal/harness"
)

//go:embed static
var static embed.FS

// FS returns the page's files, rooted so that index.html is at the top, with
// Chart.js at vendor/chart.umd.min.js and the race timeline's drawing at
// timeline.js (the harness's report draws with the same), where index.html
// loads them.
func FS() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // "static" is a valid constant path: fs.Sub cannot fail on it
	}
	return page{static: sub, vendor: chartjs.FS()}
}

// page mounts vendor over vendor/ of static: Chart.js is vendored once, in
// internal/chartjs, for the page and the harness's reports both.
type page struct{ static, vendor fs.FS }

func (p page) Open(name string) (fs.File, error) {
	if name == "timeline.js" {
		return harness.TimelineFS().Open(name)
	}
	if name == "vendor" {
		return p.vendor.Open(".")
	}
	if rest, ok := strings.CutPrefix(name, "vendor/"); ok {
		return p.vendor.Open(rest)
	}
	return p.static.Open(name)
}
