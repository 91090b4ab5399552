package spec_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"seckill/internal/api/spec"
)

var update = flag.Bool("update", false, "write docs/openapi.yaml from Build")

const docPath = "../../../docs/openapi.yaml"

// TestDocIsCurrent: docs/openapi.yaml is what Build makes from the
// operations and package api's types, and a valid OpenAPI 3.1 document. A
// body type or an operation changed without the file fails here; `go test
// ./internal/api/spec -update` writes it.
func TestDocIsCurrent(t *testing.T) {
	want, err := spec.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(docPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("docs/openapi.yaml is not what internal/api/spec builds: run go test ./internal/api/spec -update")
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(got)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("docs/openapi.yaml is not a valid description: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("docs/openapi.yaml says openapi %q, want 3.1", doc.OpenAPI)
	}
}
