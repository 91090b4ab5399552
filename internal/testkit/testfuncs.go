package testkit

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFuncs returns the names of the test functions in the _test.go files
// of the package in dir, for the tables that name the test proving each row
// (the locks', the sale modes'). A dir that does not exist or holds no test
// files fails tb.
func TestFuncs(tb testing.TB, dir string) map[string]bool {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		if _, serr := os.Stat(dir); serr != nil {
			tb.Fatalf("package %s: %v", dir, serr)
		}
		tb.Fatalf("package %s has no tests (%v)", dir, err)
	}
	names := make(map[string]bool)
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			tb.Fatal(err)
		}
		for _, d := range af.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				names[fn.Name.Name] = true
			}
		}
	}
	return names
}
