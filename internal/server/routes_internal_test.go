package server

import (
	"slices"
	"testing"

	"seckill/internal/api/spec"
)

// TestRoutesAreDescribed: the server's routes, every optional one on, are
// the operations of docs/openapi.yaml (internal/api/spec), no more and no
// fewer: a route added or dropped without its description fails here.
func TestRoutesAreDescribed(t *testing.T) {
	type runs struct{ Runs }
	type sessions struct{ Sessions }
	type passkeys struct{ Passkeys }
	s := New(Deps{Runs: runs{}, Sessions: sessions{}, Passkeys: passkeys{}})
	var served []string
	for _, r := range s.engine.Routes() {
		served = append(served, r.Method+" "+r.Path)
	}
	described := spec.Routes()
	for _, r := range served {
		if !slices.Contains(described, r) {
			t.Errorf("%s is served and not described: add it to internal/api/spec's ops", r)
		}
	}
	for _, r := range described {
		if !slices.Contains(served, r) {
			t.Errorf("%s is described and not served", r)
		}
	}
}
