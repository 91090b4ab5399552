package api

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestErrorCodesAreDocumented: every Code constant is a row of the error
// table in docs/API.md, so a code added here is added there.
func TestErrorCodesAreDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), "api.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		spec, ok := node.(*ast.ValueSpec)
		if !ok || len(spec.Names) != 1 || !strings.HasPrefix(spec.Names[0].Name, "Code") {
			return true
		}
		lit, ok := spec.Values[0].(*ast.BasicLit)
		if !ok {
			t.Fatalf("%s is not a string literal", spec.Names[0].Name)
		}
		code, _ := strconv.Unquote(lit.Value)
		n++
		if !strings.Contains(string(doc), "| `"+code+"` |") {
			t.Errorf("%s (%q) is not in docs/API.md's error table", spec.Names[0].Name, code)
		}
		return true
	})
	if n < 16 {
		t.Errorf("found %d codes in api.go, want every one of them", n)
	}
}
