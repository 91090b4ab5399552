package order

import "testing"

func TestNewAudit(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		initial, remaining, sold int
		oversold, lost           int
		verdict                  string
	}{
		{"sold out exactly", 50, 0, 50, 0, 0, VerdictOK},
		{"partly sold", 50, 20, 30, 0, 0, VerdictOK},
		{"oversold, stock drained", 50, 0, 63, 13, 13, VerdictOversold},
		{"lost updates within the stock", 50, 40, 25, 0, 15, VerdictInconsistent},
		{"units taken, no order", 50, 10, 38, 0, -2, VerdictInconsistent},
		{"oversold with stock left", 10, 5, 12, 2, 7, VerdictOversold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAudit(1, tc.initial, tc.remaining, tc.sold)
			if a.Oversold != tc.oversold || a.LostUpdates != tc.lost || a.Verdict != tc.verdict {
				t.Errorf("NewAudit(%d, %d, %d) = oversold %d, lost %d, %s; want %d, %d, %s",
					tc.initial, tc.remaining, tc.sold, a.Oversold, a.LostUpdates, a.Verdict, tc.oversold, tc.lost, tc.verdict)
			}
		})
	}
}
