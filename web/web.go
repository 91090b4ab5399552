// Package web holds the lab's page: static HTML, CSS and JavaScript with no
// build step. The service serves FS at /. Its scripts are also the drawing
// of the harness's HTML report, which inlines ChartJS and TimelineJS, so
// that Chart.js is vendored once and the page and a report draw the same.
package web

import (
	"embed"
	"io/fs"
)

//go:embed static
var static embed.FS

// ChartJS is Chart.js 4's minified UMD build (MIT,
// static/vendor/chart.LICENSE.md), which defines the global Chart.
//
//go:embed static/vendor/chart.umd.min.js
var ChartJS string

// TimelineJS draws an api.Timeline in a browser.
//
//go:embed static/timeline.js
var TimelineJS string

// FS returns the page's files, rooted so that index.html is at the top, with
// Chart.js at vendor/chart.umd.min.js and the race timeline's drawing at
// timeline.js, where index.html loads them.
func FS() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // "static" is a valid constant path: fs.Sub cannot fail on it
	}
	return sub
}
