// Package web holds the lab's page: static HTML, CSS and JavaScript with no
// build step, and one vendored chart library. The service serves FS at /.
package web

import (
	"embed"
	"io/fs"
)

//go:embed static
var static embed.FS

// FS returns the page's files, rooted so that index.html is at the top.
func FS() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // "static" is a valid constant path: fs.Sub cannot fail on it
	}
	return sub
}
