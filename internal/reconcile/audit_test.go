package reconcile

import (
	"encoding/json"
	"testing"

	"seckill/internal/api"
)

func TestNewAudit(t *testing.T) {
	for _, tc := range []struct {
		name                               string
		initial, remaining, taken, sold, q int
		oversold, lost, unsettled          int
		verdict                            string
	}{
		{"sold out exactly", 50, 0, 50, 50, 0, 0, 0, 0, api.VerdictOK},
		{"partly sold", 50, 20, 30, 30, 0, 0, 0, 0, api.VerdictOK},
		{"oversold, stock drained", 50, 0, 63, 63, 0, 13, 13, 0, api.VerdictOversold},
		{"lost updates within the stock", 50, 40, 25, 25, 0, 0, 15, 0, api.VerdictInconsistent},
		{"units taken, no order", 50, 10, 40, 38, 0, 0, -2, 2, api.VerdictLost},
		{"taken and counted, order not written yet", 50, 10, 40, 39, 0, 0, -1, 1, api.VerdictLost},
		{"oversold with stock left", 10, 5, 12, 12, 0, 2, 7, 0, api.VerdictOversold},
		{"queued, not written yet", 10, 4, 6, 2, 4, 0, 0, 0, api.VerdictOK},
		{"taken, neither queued nor written", 10, 4, 6, 2, 3, 0, -1, 1, api.VerdictLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAudit(1, tc.initial, tc.remaining, tc.taken, tc.sold, tc.q)
			if a.Oversold != tc.oversold || a.LostUpdates != tc.lost || a.Unsettled != tc.unsettled || a.Verdict != tc.verdict {
				t.Errorf("NewAudit(%d, %d, %d, %d) = oversold %d, lost %d, unsettled %d, %s; want %d, %d, %d, %s",
					tc.initial, tc.remaining, tc.taken, tc.sold, a.Oversold, a.LostUpdates, a.Unsettled, a.Verdict,
					tc.oversold, tc.lost, tc.unsettled, tc.verdict)
			}
		})
	}
}

// The last pass is kept in Redis as JSON: one an earlier version wrote,
// with the API's lower-case names, reads back the same.
func TestReconciliationKeptByEarlierVersionsReads(t *testing.T) {
	var r Reconciliation
	if err := json.Unmarshal([]byte(`{"at":"2026-11-26T07:00:00Z","takes":3,"returned":1,"held":2,"error":"x"}`), &r); err != nil {
		t.Fatal(err)
	}
	if r.Takes != 3 || r.Returned != 1 || r.Held != 2 || r.Error != "x" || r.At.IsZero() {
		t.Errorf("read %+v", r)
	}
}
