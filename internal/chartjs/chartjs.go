// Package chartjs holds Chart.js 4 (MIT, chart.LICENSE.md), vendored once
// for its two readers: the page, which serves it, and the harness's HTML
// report, which inlines it so that a report opens offline.
package chartjs

import (
	"embed"
	"io/fs"
)

// Script is the minified UMD build, which defines the global Chart.
//
//go:embed chart.umd.min.js
var Script string

//go:embed chart.umd.min.js chart.LICENSE.md
var files embed.FS

// FS returns chart.umd.min.js and chart.LICENSE.md, at its root.
func FS() fs.FS { return files }
