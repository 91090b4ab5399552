package order

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"seckill/internal/api"
	"seckill/internal/stock"
	"seckill/internal/testkit"
)

// TestModesTable checks the table GET /api/modes and the page show: one
// row per name, in teaching order, every text filled, a take the stock
// store has, and the test each row names where it says.
func TestModesTable(t *testing.T) {
	var names []string
	for _, m := range Modes() {
		names = append(names, m.Name)
		if m.Short == "" || m.Summary == "" || m.Promises == "" || m.Breaks == "" || m.Test == "" || m.Package == "" || m.seller == nil {
			t.Errorf("%s: Summary, Promises, Breaks, Test, Package and its seller must all be filled (and Short)", m.Name)
		}
		if m.taker == nil || m.Taker(stock.Locked{}).Where() != m.Store() {
			t.Errorf("%s: its taker must take from the store it names, %s", m.Name, m.Store())
		}
		fn, _, _ := strings.Cut(m.Test, "/")
		if !testkit.TestFuncs(t, filepath.Join("../..", m.Package))[fn] {
			t.Errorf("%s: Test %q: no such test function in %s", m.Name, m.Test, m.Package)
		}
	}
	want := []string{api.ModeRMW, api.ModeLua, api.ModeDB, api.ModeSQLRMW, api.ModeAsync, api.ModeMQ}
	if !slices.Equal(names, want) || !slices.Equal(ModeNames(), want) {
		t.Errorf("modes %v, want the ladder's %v", names, want)
	}
	// What the rest of the service asks of a mode, pinned to the lesson each
	// teaches: a lock around a read-modify-write, a 202 before the row.
	var locked, queued, inSQL, crash, poison, early []string
	for _, m := range Modes() {
		if m.moments.crashAfterTake {
			crash = append(crash, m.Name)
		}
		if m.moments.poison {
			poison = append(poison, m.Name)
		}
		if m.moments.releaseBeforeCommit {
			early = append(early, m.Name)
		}
		if m.Locked {
			locked = append(locked, m.Name)
		}
		if m.Queued {
			queued = append(queued, m.Name)
		}
		if m.Store() == stock.InSQL {
			inSQL = append(inSQL, m.Name)
		}
	}
	for _, c := range []struct {
		what      string
		got, want []string
	}{
		{"locked", locked, []string{"rmw", "sqlrmw"}},
		{"queued", queued, []string{"async", "mq"}},
		{"in SQL", inSQL, []string{"db", "sqlrmw"}},
		// The lab's faults, each where it has a moment to happen.
		{"crash_after_take", crash, []string{"rmw", "lua", "mq"}},
		{"poison", poison, []string{"async"}},
		{"release_before_commit", early, []string{"sqlrmw"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s modes %v, want %v", c.what, c.got, c.want)
		}
	}
	if _, err := ModeNamed("nope"); err == nil {
		t.Error("ModeNamed(nope): no error")
	}
}
