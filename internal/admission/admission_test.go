package admission_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"seckill/internal/admission"
	"seckill/internal/testkit"
)

// One request per buyer and product per period, shared by every limiter on
// the Redis (the processes of one service), and nothing refused with no
// period.
func TestOneRequestPerBuyerPerPeriod(t *testing.T) {
	rdb := testkit.NewRedis(t).Client
	const period = 300 * time.Millisecond
	buyer := time.Now().UnixNano() // the shared Redis keeps other runs' keys
	a, b := admission.NewPerBuyer(rdb, period), admission.NewPerBuyer(rdb, period)
	if err := a.Allow(t.Context(), buyer, 1); err != nil {
		t.Fatalf("first request: %v", err)
	}
	if err := b.Allow(t.Context(), buyer, 1); !errors.Is(err, admission.ErrRateLimited) {
		t.Fatalf("second request within the period, through another process's limiter: %v, want ErrRateLimited", err)
	}
	if err := a.Allow(t.Context(), buyer+1, 1); err != nil {
		t.Fatalf("another buyer: %v", err)
	}
	if err := b.Allow(t.Context(), buyer, 2); err != nil {
		t.Fatalf("the same buyer, another product: %v", err)
	}
	time.Sleep(period + 100*time.Millisecond)
	if err := a.Allow(t.Context(), buyer, 1); err != nil {
		t.Fatalf("after the period: %v", err)
	}
	off := admission.NewPerBuyer(rdb, 0)
	for i := range 3 {
		if err := off.Allow(t.Context(), buyer, 1); err != nil {
			t.Fatal(fmt.Errorf("no period, request %d: %w", i, err))
		}
	}
}
