package server_test

import (
	"fmt"
	"strings"
	"testing"

	"seckill/internal/api"
)

// TestProductViewSaysWhatA202Survives: the view of a product that answers
// 202 says in words what the 202 survives: an instance crash; a restart of
// Redis as its durability says; the loss of its Redis master only when a
// replica has the take first (issue 37). A product answered 201 from its
// row says nothing of the kind.
func TestProductViewSaysWhatA202Survives(t *testing.T) {
	e := startDefault(t)
	for _, tc := range []struct {
		name    string
		p       product
		says    []string // each in the view's survives, in order
		without string   // and not this
	}{
		{"async without a replica", product{"stock": 5, "shards": 1, "mode": api.ModeAsync},
			[]string{"an instance crash", "not the loss of its Redis master", "a stale master taking back over, loses it"}, "a replica has the take before"},
		{"async replicated", product{"stock": 5, "shards": 1, "mode": api.ModeAsync, "replicated": true},
			[]string{"an instance crash", "the loss of its Redis master", "a replica has the take before the 202 is told"}, "not the loss of its Redis master"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var view api.ProductView
			e.do("GET", fmt.Sprintf("/api/products/%d", e.reset(tc.p)), nil, &view)
			rest := view.Survives
			for _, s := range tc.says {
				i := strings.Index(rest, s)
				if i < 0 {
					t.Fatalf("survives %q: want it to say %q, after %v", view.Survives, s, tc.says)
				}
				rest = rest[i+len(s):]
			}
			if strings.Contains(view.Survives, tc.without) {
				t.Errorf("survives %q says %q", view.Survives, tc.without)
			}
			restart := map[string]string{
				api.DurabilityNone:     "not a restart of its Redis",
				api.DurabilityEverysec: "a restart of its Redis process, but not all of a restart of its machine",
				api.DurabilityAlways:   "a restart of its Redis or of its machine",
			}[view.Durability]
			if restart == "" || !strings.Contains(view.Survives, restart) {
				t.Errorf("durability %q, and survives %q: want it to say %q", view.Durability, view.Survives, restart)
			}
		})
	}
	t.Run("lua", func(t *testing.T) {
		var raw map[string]any
		e.do("GET", fmt.Sprintf("/api/products/%d", e.reset(product{"stock": 5, "shards": 1, "mode": api.ModeLua})), nil, &raw)
		if s, ok := raw["survives"]; ok {
			t.Errorf("a lua product's view says survives %q: its 201 is a row", s)
		}
	})
}
